"""A bounded prediction cache keyed on (model version, requested outputs, input bytes).

Eviction is CLOCK (second chance), as in Clipper: an entry used since the hand last passed
is spared once. Values larger than the whole cache are not stored. Sharing of identical
requests that are still in flight is the driver's job (it holds the futures); this module
only remembers finished answers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def cache_key(model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None) -> bytes:
    """A digest of everything that determines a deterministic model's answer."""
    digest = hashlib.blake2b(model.encode(), digest_size=20)
    digest.update(repr(tuple(outputs) if outputs is not None else None).encode())
    for name in sorted(inputs):
        array = inputs[name]
        digest.update(f"|{name}|{array.dtype.str}|{array.shape}|".encode())
        if array.dtype == object:
            for item in array.reshape(-1):
                raw = item if isinstance(item, bytes) else str(item).encode()
                digest.update(len(raw).to_bytes(4, "little"))
                digest.update(raw)
        else:
            digest.update(np.ascontiguousarray(array).data)
    return digest.digest()


@dataclass(slots=True)
class _Entry:
    value: Any
    size: int
    used: bool = False


class PredictionCache:
    """CLOCK-evicted cache with a byte budget."""

    def __init__(self, capacity_bytes: int = 32 * 1024 * 1024) -> None:
        self.capacity = capacity_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._entries: dict[bytes, _Entry] = {}
        self._ring: list[bytes] = []
        self._hand = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> Any | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        entry.used = True
        self.hits += 1
        return entry.value

    def put(self, key: bytes, value: Any, size: int) -> bool:
        """Store a finished answer; False when it is larger than the whole cache."""
        if size > self.capacity:
            return False
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= old.size
            index = self._ring.index(key)
            self._ring.pop(index)
            if index < self._hand:  # keep the hand on the entry it pointed at
                self._hand -= 1
        while self.size + size > self.capacity and self._ring:
            self._evict_one()
        self._entries[key] = _Entry(value, size)
        self._ring.append(key)
        self.size += size
        return True

    def _evict_one(self) -> None:
        while True:
            if self._hand >= len(self._ring):
                self._hand = 0
            key = self._ring[self._hand]
            entry = self._entries[key]
            if entry.used:
                entry.used = False
                self._hand += 1
                continue
            self._ring.pop(self._hand)
            del self._entries[key]
            self.size -= entry.size
            return
