"""The work queued per model, and what the scheduler keeps about it between polls.

Which models have requests waiting, when each one's most urgent request must be dropped
(`drops.DropTimes`, with early rejection), and which need a LOAD before they can run
(`demand.ColdModels`, with demand loading). Every change to a queue goes through here, so
those three stay in step with the queues.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from headway.control.actions import Dispatch
from headway.control.admission.drops import DropTimes
from headway.control.estimates.durations import Durations
from headway.control.jobs import Job
from headway.control.placement.slots import ModelSlot
from headway.control.policy import SchedulingPolicy
from headway.control.scheduling.demand import ColdModels
from headway.errors import HeadwayError


class QueuedWork:
    """The models' queues as the scheduler's decisions see them (see the module docstring)."""

    def __init__(
        self,
        models: Mapping[str, ModelSlot],
        durations: Durations,
        policy: SchedulingPolicy,
        *,
        demand_loading: bool,
        recheck: set[int],
    ) -> None:
        self._models = models
        self._durations = durations
        self._policy = policy
        self._demand_loading = demand_loading
        #: Workers to look at for a full batch ahead: a model of theirs just filled one.
        self._recheck = recheck
        #: Models with queued requests.
        self.waiting: set[str] = set()
        self.drops = DropTimes(models, self.waiting, durations, demand_loading=demand_loading)
        self.cold = ColdModels()

    def push(self, model: ModelSlot, request: Job, service: float | None = None) -> None:
        """Queue `request` (`service`: its predicted seconds as admission just found them;
        None: asked afresh)."""
        model.queue.push(request)
        self.waiting.add(model.key)
        if self._policy.full_batches_ahead:
            rows = model.queue.rows
            if rows >= model.max_batch > rows - request.rows:  # it just filled a batch
                self._recheck.update(model.replicas)
        if self._policy.early_reject:
            self.drops.pushed(model, request, service)
        if model.queue.peek() is request:
            self.mark_cold(model)

    def refresh_drop(self, model: ModelSlot) -> None:
        """Recompute `model.drop_at` after what it depends on changed (its placement, the load
        estimate): a cached time that became too late would keep a hopeless request at the head
        of an unloaded model's queue, and with it the load its other requests still need."""
        if self._policy.early_reject:  # else nothing is ever dropped: no drop time to keep
            self.drops.refresh(model)

    def mark_cold(self, model: ModelSlot) -> None:
        if self._demand_loading:
            self.cold.mark(model)

    def unplaced(self, model: ModelSlot) -> None:
        """`model` lost a replica or a load: what its queue waits for changed. (A generative
        model's queue holds sequences, which `steps` drops.)"""
        if model.queue and model.sequences is None:
            self.refresh_drop(model)  # unloaded again: a load counts once more
            self.mark_cold(model)

    def worker_lost(
        self, inflight: Iterable[Dispatch], held: list[ModelSlot], retries: int
    ) -> tuple[list[Job], list[Job]]:
        """A worker died with `inflight` actions, holding or loading `held`: requeue the
        requests it was sent that have had no more than `retries` attempts, whose model is
        still served and that streamed no part yet (a retry would repeat it); returns
        (requeued, the rest). What `held` wait for changed."""
        retried: list[Job] = []
        failed: list[Job] = []
        for request in (r for dispatch in inflight for r in dispatch.requests):
            request.attempts += 1
            home = self._models.get(request.model)
            again = request.attempts <= retries and not (request.stream and request.made)
            if again and home is not None:
                self.push(home, request)
                retried.append(request)
            else:
                failed.append(request)
        for model in held:
            self.unplaced(model)
        return retried, failed

    def requeue(self, key: str, requests: list[Job]) -> None:
        """Queue `requests` of `key` again (a worker refused them), if it is still served."""
        model = self._models.get(key)
        if model is not None:
            for request in requests:
                self.push(model, request)

    def load_estimate_changed(self) -> None:
        """The estimate of a LOAD never measured changed: refresh the drop times of the queued,
        unplaced models that depend on it."""
        for key in self.waiting:
            model = self._models[key]
            if model.unplaced and not self._durations.trusts_own_load(key):
                self.refresh_drop(model)

    def forget(self, key: str, model: ModelSlot | None) -> list[Job]:
        """`key` is no longer served: its queued requests, for the caller to fail."""
        self.waiting.discard(key)
        if model is None:
            return []
        return [model.queue.pop() for _ in range(len(model.queue))]

    def withdraw(self, model: ModelSlot, job: Job) -> bool:
        """Take `job` out of `model`'s queue; False if it is not queued there."""
        if not any(queued is job for queued in model.queue):
            return False
        model.queue.remove_if({id(job)})
        if not model.queue:
            self.waiting.discard(model.key)
            model.drop_at = float("inf")
        else:
            self.refresh_drop(model)
        return True

    def drop_hopeless(self, model: ModelSlot, now: float) -> list[tuple[Job, HeadwayError]]:
        """Take out of `model`'s queue the requests that can no longer make their deadlines,
        each with its error."""
        rejected = self.drops.take_doomed(model, now)
        if model.queue:
            self.drops.refresh(model)
            self.mark_cold(model)
        else:
            self.waiting.discard(model.key)
            model.drop_at = float("inf")
        return rejected
