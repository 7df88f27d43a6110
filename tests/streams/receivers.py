"""What the streams tests share: a receiver that records every call made to it, in order."""

from __future__ import annotations

import asyncio

from headway.control.request import Prediction, Tensors


class Recorder:
    """A `Receiver` that keeps each call (`("part", outputs)`, `("done", prediction)`,
    `("fail", error)`) with the loop time it came, and settles `ended` on the last."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.calls: list[tuple[str, object, float]] = []
        self.ended: asyncio.Future[None] = loop.create_future()

    def part(self, outputs: Tensors) -> None:
        self.calls.append(("part", outputs, self.loop.time()))

    def done(self, prediction: Prediction) -> None:
        self.calls.append(("done", prediction, self.loop.time()))
        self.ended.set_result(None)

    def fail(self, error: Exception) -> None:
        self.calls.append(("fail", error, self.loop.time()))
        self.ended.set_result(None)

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.calls]

    def parts(self) -> list[Tensors]:
        return [value for kind, value, _ in self.calls if kind == "part"]  # type: ignore[misc]

    @property
    def error(self) -> Exception | None:
        last = self.calls[-1] if self.calls else None
        return last[1] if last and last[0] == "fail" else None  # type: ignore[return-value]
