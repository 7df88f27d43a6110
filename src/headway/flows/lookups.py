"""The values flows look up: held in memory for reads on the request path, written through to
the store so that they survive a restart. A key never put reads as NULL (None)."""

from __future__ import annotations

from typing import Any

import orjson

from headway.errors import InvalidInput, ModelNotFound
from headway.store import Store
from headway.store.lookups import LookupStore

MAX_KEY = 512


class Lookups:
    def __init__(self, store: Store | None = None) -> None:
        self.db = LookupStore(store) if store is not None else None
        self.values: dict[str, Any] = self.db.all() if self.db is not None else {}

    def lookup(self, key: str) -> Any:
        return self.values.get(key)

    def put(self, key: str, value: Any) -> None:
        if not key or len(key) > MAX_KEY:
            raise InvalidInput(f"a lookup key must be 1 to {MAX_KEY} characters")
        try:  # what the store keeps is what a lookup reads, here and after a restart
            value = orjson.loads(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY))
        except TypeError as exc:
            raise InvalidInput(f"lookup {key!r}: the value is not JSON: {exc}") from None
        if self.db is not None:
            self.db.put(key, value)
        self.values[key] = value

    def get(self, key: str) -> Any:
        if key not in self.values:
            raise ModelNotFound(f"no lookup value under key {key!r}")
        return self.values[key]

    def delete(self, key: str) -> None:
        self.get(key)
        if self.db is not None:
            self.db.delete(key)
        del self.values[key]
