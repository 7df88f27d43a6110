"""The tuner in the server: `headway serve --plan plan.yaml --tune`.

Every `interval` seconds it counts the queries that reached the pipeline's first stage's model
since the last tick (the controller's per-model request counter: nothing is added to the
request path), feeds them to InferLine's tuner (`headway.planning.tuner`) and applies its
decisions with `Controller.scale`, logging each change with its reason. Arrivals are counted
per tick, so the tuner leaves out windows shorter than a tick. `/metrics` shows the replicas
each stage is asked for and the changes made (`statistics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from headway.clock import Clock, MonotonicClock
from headway.control.controller import Controller
from headway.planning.plan_file import PlanFile
from headway.planning.tuner import Change, Tuner

log = logging.getLogger("headway.tuner")

INTERVAL = 0.1


class LiveTuner:
    """Runs a `Tuner` against a live controller (a companion of the HTTP app)."""

    def __init__(
        self,
        controller: Controller,
        plan: PlanFile,
        *,
        interval: float = INTERVAL,
        clock: Clock | None = None,
        **options: Any,
    ) -> None:
        self.controller = controller
        self.plan = plan
        self.interval = interval
        self.tuner = Tuner(plan, clock or MonotonicClock(), shortest=interval, **options)
        self.models = {stage.name: stage.model for stage in plan.stages}
        self.entry = plan.stages[0].model  # parents come first: an input stage
        self.changes: dict[tuple[str, str], int] = {}  # (stage, "up"/"down") -> count
        self._seen: int | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self.controller.started:
                self.step()

    def step(self) -> list[Change]:
        """One tick: count the new arrivals, decide, apply."""
        seen = self.controller.model_statistics(self.entry).counts.requests
        if self._seen is not None and seen > self._seen:
            self.tuner.arrived(seen - self._seen)
        self._seen = seen
        made = self.tuner.tick()
        for change in made:
            placed = self.controller.scale(self.models[change.stage], change.after)
            self.changes[change.stage, change.direction] = (
                self.changes.get((change.stage, change.direction), 0) + 1
            )
            log.info(
                "stage %s (model %s): %d -> %d replicas (%d placed): %s",
                change.stage,
                self.models[change.stage],
                change.before,
                change.after,
                placed,
                change.reason,
            )
        return made

    def statistics(self) -> dict[str, Any]:
        return {
            "replicas": dict(self.tuner.replicas),
            "models": dict(self.models),
            "changes": {
                f"{stage}:{direction}": n for (stage, direction), n in self.changes.items()
            },
        }
