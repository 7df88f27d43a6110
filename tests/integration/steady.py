"""A steady load for the tests that look at a live server under traffic: one model's
inference requests at a fixed rate from a thread, each answer's status kept."""

from __future__ import annotations

import threading
import time
from collections import Counter
from types import TracebackType

import httpx


class SteadyLoad:
    """Posts `body` to `model`'s infer route `rate` times a second (open loop: a request
    that is late goes at once, none is skipped) until the context ends."""

    def __init__(self, url: str, model: str, body: bytes, rate: float) -> None:
        self.url, self.model, self.body, self.rate = url, model, body, rate
        self.statuses: Counter[int] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SteadyLoad:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    @property
    def sent(self) -> int:
        return sum(self.statuses.values())

    def _run(self) -> None:
        path = f"/v2/models/{self.model}/infer"
        due = time.monotonic()
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self._stop.is_set():
                self.statuses[client.post(path, content=self.body).status_code] += 1
                due += 1.0 / self.rate
                pause = due - time.monotonic()
                if pause > 0:
                    self._stop.wait(pause)
