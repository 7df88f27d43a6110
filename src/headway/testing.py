"""Test doubles for the control layer: an engine whose workers run no models.

`FakeEngine` implements the `Engine` protocol in this process, so a `Controller` can be driven
without worker processes: every action is answered on the next turn of the event loop (or, with
`hold` set, when the test releases it), and what was sent is remembered for the test to read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from headway.control.actions import INFER, LOAD
from headway.control.engine import Action, Answer, Engine, OnExit, OnMessage, OnReady, Tensors

#: What an INFER computes from its action and input tensors.
Compute = Callable[[Action, Tensors], Tensors]


def echo(action: Action, tensors: Tensors) -> Tensors:
    """Each input comes back as the output of the same name."""
    return dict(tensors)


class FakeEngine(Engine):
    """`size` in-process workers that run no models. A LOAD succeeds (with an empty signature)
    unless its model key is in `fail_loads`; an INFER answers with `compute(action, inputs)`.

    Replies come on the next loop turn, never inside `send`. While `hold` is set, INFERs wait
    in `held` until `release` answers the oldest inside that call (`catch_up` answers all).
    """

    kind = "fake"

    def __init__(
        self,
        size: int = 1,
        *,
        compute: Compute = echo,
        fail_loads: Collection[str] = (),
        duration: float = 1e-4,
    ) -> None:
        self.size = size
        self.compute = compute
        self.fail_loads = fail_loads
        self.duration = duration
        self.hold = False
        #: Every action sent, in order, with its worker.
        self.sent: list[tuple[int, Action]] = []
        #: The INFERs waiting for `release`, with their worker and inputs.
        self.held: list[tuple[int, Action, Tensors]] = []
        self.on_ready: OnReady = lambda worker, pid: None
        self.on_message: OnMessage = lambda worker, reply, tensors: None
        self.on_exit: OnExit = lambda worker, code: None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for worker in range(self.size):
            loop.call_soon(self.on_ready, worker, 1000 + worker)

    async def stop(self) -> None:
        return None

    def pids(self) -> dict[int, int]:
        return {worker: 1000 + worker for worker in range(self.size)}

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

    def loads(self) -> list[tuple[int, Action]]:
        """Every LOAD sent, with its worker."""
        return [(worker, action) for worker, action in self.sent if action["op"] == LOAD]

    def answer(self, action: Action, tensors: Tensors) -> Answer:
        """The reply to `action`, as a worker would give it."""
        if action["op"] == LOAD and action.get("model") in self.fail_loads:
            return {"id": action.get("id"), "ok": False, "error": "weights file is corrupt"}, {}
        outputs: Tensors = {}
        if action["op"] == LOAD:
            return {
                "id": action.get("id"),
                "ok": True,
                "duration": self.duration,
                "inputs": [],
                "outputs": [],
                "memory_mb": 0.0,
            }, outputs
        if action["op"] == INFER:
            outputs = self.compute(action, tensors)
        return {"id": action.get("id"), "ok": True, "duration": self.duration}, outputs

    def _reply(self, worker: int, action: Action, tensors: Tensors) -> None:
        self.on_message(worker, *self.answer(action, tensors))
