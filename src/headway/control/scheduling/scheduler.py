"""The scheduler: which action runs on which worker next, and what is rejected at once.

Pure logic with an injected clock (Clockwork's "consolidate choice"): it decides, the relay
carries its decisions out. It decides over the placement (which worker holds which model, the
actions in flight, the queues) with the estimates, asks admission what to refuse, and ties its
parts together: `queued_work` (the queues' drop times and cold models), `choices` (the next
action on a worker, and the action it becomes), `demand` and `probes` (which LOAD), `outcomes`
(what an ended action teaches).
"""

from __future__ import annotations

from typing import Any

from headway.clock import Clock
from headway.control.actions import STEP, Decisions, Dispatch, Tally, earliest
from headway.control.admission.admit import Admission
from headway.control.admission.backlog import Backlogs
from headway.control.admission.reasons import DROPPED, REFUSED_BY_WORKER
from headway.control.admission.streams import admit_sequence
from headway.control.engine import Reply
from headway.control.estimates.durations import Durations
from headway.control.estimates.profiles import LatencyEstimator
from headway.control.estimates.steps import StepEstimates
from headway.control.jobs import Job, Sequence
from headway.control.placement.slots import ModelSlot, Placement, WorkerSlot
from headway.control.policy import HEADWAY, SchedulingPolicy
from headway.control.scheduling.choices import (
    ActionMaker,
    full_batch_ahead,
    hold_until,
    most_urgent,
    start_alone,
)
from headway.control.scheduling.outcomes import learn
from headway.control.scheduling.probes import LoadProbes, Probes
from headway.control.scheduling.queued_work import QueuedWork
from headway.control.scheduling.steps import StepOutcome, Steps
from headway.control.snapshots import ModelScheduling, SchedulerSnapshot
from headway.errors import ColdStartTooSlow


class Scheduler:
    """Deadline-aware batching, loading and eviction over workers.

    It keeps one queue per model (replicas share it) and each worker's timeline of actions in
    flight, and on each `poll`:

    1. drops queued requests that can no longer meet their deadline (answered at once, never late);
    2. gives each available worker its next action: a queued control action (explicit LOAD or
       UNLOAD) first; else the largest batch of its most urgent loaded model that the estimates
       say will meet the earliest deadline in it; or, with demand loading, a LOAD of the most
       urgent model that no worker holds (evicting idle, least recently used models to fit the
       worker's memory share), when its requests can still make their deadlines after the load;
       a worker holding a generative model runs its next step (`steps`: iteration-level
       batching) unless another model's request is due before that step's most urgent part.

    Each INFER carries the latest time it may start; a worker refuses one that arrives later.
    `SchedulingPolicy` switches these behaviours off one by one for a Clipper-style baseline."""

    def __init__(
        self,
        clock: Clock,
        estimator: LatencyEstimator | None = None,
        *,
        policy: SchedulingPolicy = HEADWAY,
        demand_loading: bool = False,
        retries: int = 1,
        overhead_window: int = 64,
        inline: bool = False,
        own_in_flight: bool = False,
    ) -> None:
        self.clock = clock
        self.durations = Durations(estimator, overhead_window=overhead_window)
        self.estimator = self.durations.estimator
        self.loads = self.durations.loads
        self.probes = Probes(self.durations)
        self.load_probes = LoadProbes(self.durations)
        self.policy = policy
        self.demand_loading = demand_loading
        self.retries = retries
        #: What it caused, in all (`counters`) and per model and reason (`events`, for metrics).
        self.tally = tally = Tally()
        self.counters, self.events, self.count = tally.counters, tally.events, tally.count
        #: The workers and models, and which holds which; its dicts are read here directly.
        self.placement = Placement(
            clock,
            fifo=not policy.deadline_order,
            track_changes=policy.full_batches_ahead,
            inline=inline,
            own_in_flight=own_in_flight,
        )
        self._models = self.placement.models
        self._workers = self.placement.workers
        #: workers to look at for a full batch ahead (see `_full_batches_ahead`)
        self._recheck = self.placement.changed
        self._queued = QueuedWork(
            self._models,
            self.durations,
            policy,
            demand_loading=demand_loading,
            recheck=self._recheck,
        )
        self._waiting = self._queued.waiting
        self._drops = self._queued.drops
        self._push = self._queued.push
        #: Carries out what `poll` and `start_now` choose (`choices.ActionMaker`).
        self.actions = ActionMaker(
            clock, self.durations, policy, self._queued, tally, unplaced=self.unplaced
        )
        #: What admission's refusals for the work ahead say of later requests: dropped
        #: whenever that work may have shrunk (`shrank`: an action sent or ended, a request
        #: withdrawn or dropped, a placement changed).
        self.backlogs = Backlogs()
        #: Generative models' steps (`steps`), predicted from their step profiles.
        self.step_estimates = StepEstimates()
        self.steps = Steps(
            self._models, self.durations, self.step_estimates, tally, self.actions.ids
        )
        #: Whether a job joins its queue (`admission.admit`).
        self.admission = Admission(
            self.durations,
            self.placement,
            self.backlogs,
            tally,
            early_reject=policy.early_reject,
            demand_loading=demand_loading,
        )

    # -- topology: the placement, and what it changes for the queues ------------------------
    def remove_model(self, key: str) -> list[Job]:
        """Forget a model; returns its queued requests for the caller to fail."""
        self.backlogs.forget(key)
        self.probes.forget(key)
        self.load_probes.forget(key)
        model = self.placement.remove_model(key)
        running = [] if model is None else self.steps.running(model)
        self.steps.waiting.discard(key)
        return [*self._queued.forget(key, model), *running]

    def placed(self, key: str, worker: int, size_mb: float | None = None) -> None:
        """`key` is now loaded on `worker` (`size_mb`: its measured memory, when known)."""
        self.placement.placed(key, worker, size_mb)
        self.backlogs.shrank()

    def unplaced(self, key: str, worker: int) -> None:
        model = self.placement.unplaced(key, worker)
        if model is not None:
            self._queued.unplaced(model)

    def load_failed(self, key: str, worker: int) -> None:
        """A LOAD did not succeed: release what it reserved."""
        self.unplaced(key, worker)

    def worker_lost(self, worker: int) -> tuple[list[Job], list[Job]]:
        """A worker died: requeue what it held (once), fail the rest. Returns (retried, failed)."""
        lost = self.placement.remove_worker(worker)
        if lost is None:
            return [], []
        slot, held = lost
        self.backlogs.shrank()
        infers = [d for d in slot.inflight if d.kind != STEP]
        retried, failed = self._queued.worker_lost(infers, held, self.retries)
        again, lost_streams = self.steps.worker_lost(worker, held, self.retries)
        return [*retried, *again], [*failed, *lost_streams]

    # -- admission: `admission.Admission` decides ---------------------------------------------
    def control(self, worker: int, kind: str, key: str, payload: Any = None) -> Dispatch:
        """Queue a LOAD or UNLOAD for `worker`; it runs before any further INFER there."""
        dispatch = self.actions.control(worker, kind, key, payload)
        self.placement.control(dispatch)
        return dispatch

    def submit(self, job: Job) -> None:
        """Admit a job or raise at once (`admission.Admission.admit`): Overloaded (queue
        full) or DeadlineUnmeetable. A generative model's sequence is judged by its two
        targets (`admission.streams`) and waits for a slot in its model's queue."""
        model = self._models[job.model]
        if isinstance(job, Sequence):
            admit_sequence(
                model,
                job,
                self.clock.now(),
                steps=self.step_estimates,
                placement=self.placement,
                overhead=self.durations.overhead + self.steps.turn,
                margin=self.steps.margin_at(job.model, self.clock.now()),
                tally=self.tally,
            )
            self.steps.waits(model, job)
            return
        try:
            service = self.admission.admit(model, job, self.clock.now())
        except ColdStartTooSlow:
            if model.unplaced:
                self.load_probes.refused(model.key)  # on the estimate alone: measure it
            raise
        self._push(model, job, service)

    def withdraw(self, job: Job) -> bool:
        """Take `job` out of its model's queue: its submitter no longer wants it, and it must
        not take a worker. False if it is not queued (sent already, answered or dropped)."""
        model = self._models.get(job.model)
        if isinstance(job, Sequence) and model is not None and model.sequences is not None:
            if job.worker >= 0:  # running: stopped with its worker's next step
                model.sequences.withdraw(job)
                return False
            return bool(model.queue.remove_if({id(job)}))
        found = model is not None and self._queued.withdraw(model, job)
        if found:
            self.backlogs.shrank()
        return found

    def probe_size(self, request: Job) -> int | None:
        """After `request` was refused at admission: how many rows to measure its model with
        (`Probes.after_refusal`), or None."""
        model = self._models.get(request.model)
        return self.probes.after_refusal(model, request, self.clock.now())

    def start_now(self, request: Job) -> Dispatch | None:
        """Start `request` alone at once when `choices.start_alone` finds it an idle
        worker: the path of a request that finds the server idle (no queue, no poll); else
        None (submit it)."""
        now = self.clock.now()
        found = start_alone(self._models, request, now, self.durations, self._workers)
        if found is None:
            return None
        model, worker, service = found
        model.alone_since = request.arrival
        dispatch = self.actions.infer(model, [request], request.rows, service)
        self.placement.launch(worker, dispatch, now)
        self.backlogs.shrank()
        return dispatch

    # -- decisions ----------------------------------------------------------------------------
    def full_batch_queued(self, key: str, *, within: float) -> bool:
        """Whether `key`'s queue holds at least a full batch of rows, and such a batch is
        predicted to run within `within` s."""
        model = self._models.get(key)
        if model is None or model.queue.rows < model.max_batch:
            return False
        run = self._full_batch_run(model)
        return run is not None and run <= within

    def _full_batch_run(self, model: ModelSlot) -> float | None:
        return self.durations.service_time(model.key, model.max_batch)

    def poll(self) -> Decisions:
        """Decide what available workers run next and which requests to reject."""
        now = self.clock.now()
        decisions = Decisions()
        if self.policy.early_reject:
            for model in self._drops.due(now):
                self._drop_hopeless(model, now, decisions)
        if self.steps.waiting:
            wake = self.steps.drop_hopeless(now, decisions)
            if wake is not None:
                decisions.wakeup = earliest(decisions.wakeup, wake)
        for worker in self._workers.values():
            while worker.available(now, self.policy.schedule_ahead):
                dispatch = self._next_action(worker, now, decisions)
                if dispatch is None:
                    break
                self._start(worker, dispatch, now, decisions)
        if self._recheck:  # after every idle worker had its pick
            self._full_batches_ahead(now, decisions)
        if self.policy.early_reject:
            wake = self._drops.next()
            if wake is not None:
                decisions.wakeup = earliest(decisions.wakeup, wake)
        return decisions

    def _start(
        self, worker: WorkerSlot, dispatch: Dispatch, now: float, decisions: Decisions
    ) -> None:
        self.placement.launch(worker, dispatch, now)
        self.backlogs.shrank()
        decisions.dispatches.append(dispatch)

    def _full_batches_ahead(self, now: float, decisions: Decisions) -> None:
        """Send busy workers their next full batch ahead (`choices.full_batch_ahead`).

        Only workers that something happened to since the last poll are looked at (`_recheck`:
        an action sent or ended, a model of theirs filled a batch), so a poll stays cheap with
        thousands of models on dozens of busy workers."""
        recheck = sorted(self._recheck)
        self._recheck.clear()  # the set `QueuedWork` adds to: cleared, not replaced
        for worker_id in recheck:
            worker = self._workers.get(worker_id)
            if worker is None:
                continue
            model = full_batch_ahead(worker, self._models, self._waiting, self.durations)
            if model is not None:
                batch = self.actions.batch(model, worker.free_at, decisions)
                self._start(worker, batch, now, decisions)

    def _next_action(self, worker: WorkerSlot, now: float, decisions: Decisions) -> Dispatch | None:
        if worker.control:
            return worker.control.popleft()
        start = max(now, worker.free_at)
        model = most_urgent(worker, self._models, self._waiting)
        generative = self.steps.most_urgent(worker) if worker.models else None
        if generative is not None:
            head = None if model is None else model.queue.peek()
            if head is None or generative[0] <= head.deadline:
                step = self.steps.step(worker, generative[1], now, decisions)
                if step is not None:
                    return step
        cold = None
        if self.demand_loading:
            cold = self._queued.cold.choose(
                worker,
                start,
                models=self._models,
                waiting=self._waiting,
                durations=self.durations,
                policy=self.policy,
            )
        if cold is not None and (model is None or cold.head < model.queue.head_key()):  # type: ignore[operator]
            return self.actions.load(worker, cold.model, cold.victims)
        if model is None:
            probe = self.load_probes.choose(worker, now, models=self._models, waiting=self._waiting)
            if probe is not None:  # nothing queued for this idle worker: measure a load
                self.count(probe[0].key, "probe_loads")
                return self.actions.load(worker, *probe)
            due = self.load_probes.wakeup(worker, now)
            if due is not None:
                decisions.wakeup = earliest(decisions.wakeup, due)
            return None
        wait = hold_until(model, now, self.durations)
        if wait is not None:
            decisions.wakeup = earliest(decisions.wakeup, wait)
            return None
        return self.actions.batch(model, start, decisions)

    def _drop_hopeless(self, model: ModelSlot, now: float, decisions: Decisions) -> None:
        rejected = self._queued.drop_hopeless(model, now)
        decisions.rejected.extend(rejected)
        self.backlogs.shrank()
        for _, error in rejected:
            self.count(model.key, DROPPED, error.reason)

    # -- results ------------------------------------------------------------------------------
    def complete(
        self, dispatch_id: int, duration: float | None, first: float | None = None
    ) -> Dispatch | None:
        """An action finished (`duration`: seconds the worker measured; None if it failed;
        `first`: a streamed INFER's seconds to its first part)."""
        now = self.clock.now()
        dispatch = self.placement.finish(dispatch_id, now, duration)
        if dispatch is None:
            return None
        self.backlogs.shrank()
        if dispatch.kind == STEP:
            if duration is not None:
                self.steps.learn(dispatch, duration)
                self.durations.observe_round_trip(now - dispatch.startable_at - duration, now)
            return dispatch
        if duration is not None:
            waiting = None
            if self.placement.inline:  # it ran on the event loop: did work wait meanwhile?
                worker = self._workers.get(dispatch.worker)
                waiting = bool(self._waiting) or (worker is not None and bool(worker.inflight))
            estimate_changed = learn(
                dispatch,
                duration,
                now,
                durations=self.durations,
                models=self._models,
                inline_waiting=waiting,
                first=first,
            )
            self.placement.turn = self.durations.turn
            if estimate_changed and self.demand_loading:
                # (only this model's own estimate changed, and it is loaded)
                self._queued.load_estimate_changed()
        return dispatch

    def stepped(self, dispatch: Dispatch, reply: Reply | None) -> StepOutcome:
        """A generative model's step ended (`complete`): what it made (`steps.Steps.stepped`);
        `reply` None: it failed as a whole."""
        return self.steps.stepped(dispatch, reply, self.clock.now())

    def refused(self, dispatch_id: int) -> Dispatch | None:
        """The worker refused an INFER that reached it after its latest start: requeue its
        requests (the next poll drops those that can no longer make it)."""
        dispatch = self.placement.finish(dispatch_id, self.clock.now())
        if dispatch is None:
            return None
        self.backlogs.shrank()
        self.count(dispatch.model, REFUSED_BY_WORKER)
        self._queued.requeue(dispatch.model, dispatch.requests)
        return dispatch

    # -- statistics ---------------------------------------------------------------------------
    def queue_length(self, key: str) -> int:
        model = self._models.get(key)
        return len(model.queue) if model else 0

    def statistics(self) -> SchedulerSnapshot:
        """Its policy, its round-trip estimate and what it caused, so far."""
        return SchedulerSnapshot(
            policy=self.policy.name,
            overhead_s=self.durations.overhead,
            counters=vars(self.counters).copy(),
            events=dict(self.events),
        )

    def model_statistics(self, key: str) -> ModelScheduling:
        """What it keeps of model `key` (its queue, replicas, batches and estimates)."""
        model = self._models.get(key)
        estimates = self.estimator.estimates(key)
        if model is None:
            return ModelScheduling(0, (), 0.0, 0, 0, estimates)
        return model.statistics(estimates)
