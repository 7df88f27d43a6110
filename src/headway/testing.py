"""Test doubles for the control layer: an engine whose workers run no models.

`FakeEngine` implements the `Engine` protocol in this process, so a `Controller` can be driven
without worker processes: every action is answered on the next loop turn, or, with `hold` set,
when the test releases it. It answers as a worker would (`headway.sim.workers.ModellessEngine`);
the simulator's workers in virtual time are `headway.sim.workers.SimulatedEngine`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from functools import partial

from headway.control.actions import INFER
from headway.control.engine import Action, Tensors
from headway.sim.workers import Compute, ModellessEngine


def echo(action: Action, tensors: Tensors) -> Tensors:
    """Each input comes back as the output of the same name."""
    return dict(tensors)


class FakeEngine(ModellessEngine):
    """`size` in-process workers that run no models (`ModellessEngine`). Replies come on the
    next loop turn, never inside `send`; while `hold` is set, INFERs wait in `held` until
    `release` answers the oldest inside that call (`catch_up` answers all)."""

    kind = "fake"

    def __init__(
        self,
        size: int = 1,
        *,
        compute: Compute = echo,
        fail_loads: Collection[str] = (),
        duration: float = 1e-4,
    ) -> None:
        super().__init__(size, compute=compute, fail_loads=fail_loads, duration=duration)
        self.hold = False
        #: The INFERs waiting for `release`, with their worker and inputs.
        self.held: list[tuple[int, Action, Tensors]] = []

    async def start(self) -> None:
        for worker in range(self.size):
            asyncio.get_running_loop().call_soon(partial(self.on_ready, worker, 1000 + worker))

    def send(self, worker: int, action: Action, tensors: Tensors) -> bool:
        self.sent.append((worker, action))
        if action["op"] == INFER and self.hold:
            self.held.append((worker, action, tensors))
        else:
            asyncio.get_running_loop().call_soon(self._reply, worker, action, tensors)
        return True

    def catch_up(self) -> None:
        while self.held:
            self.release()

    def release(self) -> None:
        """Answer the oldest held INFER, inside this call."""
        self._reply(*self.held.pop(0))

    def infers(self) -> list[int]:
        """The row counts of the held INFERs."""
        return [action["rows"] for _, action, _ in self.held]

    def _reply(self, worker: int, action: Action, tensors: Tensors) -> None:
        self.on_message(worker, *self.answer(worker, action, tensors))
