"""What applications and flows use of the controller, as one narrow protocol (`Serving`).

They send requests through its doors (`submit`, `infer`, `withdraw`), look models up, and load
the models a flow's stages run; nothing else. `Controller` is one; tests fake it with a small
class of their own, checked against the same protocol.
"""

from __future__ import annotations

from typing import Protocol

from headway.clock import TimerClock
from headway.control.models.states import ModelState
from headway.control.request import InferenceRequest, Prediction, Receiver, Ticket
from headway.repository import Repository, TensorSpec


class Serving(Protocol):
    """The controller as applications and flows see it (see the module docstring)."""

    @property
    def clock(self) -> TimerClock: ...

    @property
    def repository(self) -> Repository: ...

    def submit(self, request: InferenceRequest, receiver: Receiver) -> Ticket: ...

    def withdraw(self, ticket: Ticket) -> bool: ...

    def withdraw_queued(self, ticket: Ticket) -> bool: ...

    def stop_running(self, ticket: Ticket) -> bool: ...

    def keep_apart(self, names: list[str], why: str) -> None: ...

    async def infer(self, request: InferenceRequest) -> Prediction: ...

    def served(self, name: str, version: int | None = None) -> ModelState | None: ...

    def model(self, name: str, version: str | None = None) -> ModelState: ...

    def shares_workers(self, name: str) -> bool: ...

    async def load(self, name: str, version: str | None = None) -> ModelState: ...

    async def unload(self, name: str, version: str | None = None) -> None: ...

    def warm_up(self, name: str, inputs: tuple[TensorSpec, ...]) -> None: ...

    def warming(self, name: str, version: int | None = None) -> bool: ...
