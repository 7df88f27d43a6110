"""Placement: which workers and models there are, which worker holds which, what each runs.

The scheduler's view of each worker (its timeline: the actions in flight, in order, and when
it is predicted to be free; its memory share and what it holds) and of each model (its queue,
where it is held or loading, when its most urgent request must be dropped). Workers join and
die, models are registered and forgotten, LOADs and UNLOADs place and unplace them. Clockwork
keeps a timeline only a short time ahead, so predictions stay close to what the worker does
(`WorkerSlot.available`). State, not decisions: admission and the scheduler decide over it,
reading `Placement.models` and `workers` directly on the request path.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from headway.clock import Clock
from headway.control.actions import LOAD, Dispatch
from headway.control.estimates.batch_size import AIMD
from headway.control.placement.memory import WorkerMemory
from headway.control.placement.queues import DeadlineQueue
from headway.control.placement.sequences import SequenceSlots
from headway.control.snapshots import ModelScheduling
from headway.repository import Generation

#: At most this many actions are in flight on one worker, whatever `schedule_ahead` allows.
MAX_IN_FLIGHT = 4


@dataclass(eq=False)
class WorkerSlot:
    """One worker: the models it holds, its memory share and its timeline."""

    id: int
    memory: WorkerMemory
    alive: bool = True
    models: set[str] = field(default_factory=set)
    inflight: deque[Dispatch] = field(default_factory=deque)
    control: deque[Dispatch] = field(default_factory=deque)
    free_at: float = 0.0
    #: When the action before the first one in flight was heard to end: the earliest the
    #: worker could start the first (it runs its actions one after another).
    ended_at: float = float("-inf")
    #: Seconds its actions ran, as it measured them, by model key (what it spent its time on).
    ran_s: dict[str, float] = field(default_factory=dict)

    def hold(self, key: str, size_mb: float, now: float) -> None:
        """Count `key`'s memory here (replacing the reserved estimate with `size_mb`)."""
        if key in self.memory:
            self.memory.resize(key, size_mb)
        else:
            self.memory.add(key, size_mb, now)

    def release(self, key: str) -> None:
        """`key` is no longer held here."""
        self.models.discard(key)
        self.memory.remove(key)

    def available(self, now: float, schedule_ahead: float) -> bool:
        """Whether another action may be sent now: idle, or (with `schedule_ahead` > 0) free
        within that many seconds and fewer than MAX_IN_FLIGHT actions queued."""
        if not self.alive:
            return False
        if not self.inflight:
            return True
        return (
            len(self.inflight) < MAX_IN_FLIGHT
            and self.free_at - now <= schedule_ahead
            and schedule_ahead > 0
        )

    def start(self, dispatch: Dispatch, now: float) -> None:
        """Put `dispatch` at the end of the timeline (its expected start and the new free time)."""
        dispatch.worker = self.id
        dispatch.sent_at = now
        dispatch.earliest = max(now, self.free_at)
        self.free_at = dispatch.earliest + (dispatch.expected or 0.0)
        self.inflight.append(dispatch)
        self.memory.touch(dispatch.model, now)

    def finish(self, dispatch: Dispatch, now: float) -> None:
        """`dispatch` ended (done, failed or refused); an empty timeline is free now."""
        if dispatch in self.inflight:
            self.inflight.remove(dispatch)
        dispatch.startable_at = max(dispatch.sent_at, self.ended_at)
        self.ended_at = now
        if not self.inflight:
            self.free_at = now


@dataclass(eq=False)
class ModelSlot:
    """One model: its request queue (shared by its replicas), where it is held or loading, and
    the time its most urgent queued request must be dropped if it has not started."""

    key: str
    queue: DeadlineQueue
    max_batch: int
    batch_delay: float
    aimd: AIMD
    size_mb: float = 0.0
    replicas: set[int] = field(default_factory=set)
    loading: set[int] = field(default_factory=set)
    drop_at: float = float("inf")
    batches: int = 0
    late_batches: int = 0
    finished_at: float = float("-inf")  # when its last INFER ended
    alone_since: float = float("-inf")  # when the last request started alone may have arrived
    #: A generative model's running sequences (its queue holds those waiting for a slot);
    #: None for a model that answers each batch in one call.
    sequences: SequenceSlots | None = None

    def statistics(self, estimates: dict[int, float]) -> ModelScheduling:
        """What the scheduler keeps of it now, with its latency `estimates` by batch size."""
        return ModelScheduling(
            queued=len(self.queue),
            replicas=tuple(sorted(self.replicas)),
            aimd_limit=self.aimd.limit,
            batches=self.batches,
            late_batches=self.late_batches,
            estimates_s=estimates,
            running=0 if self.sequences is None else self.sequences.total(),
        )

    @property
    def unplaced(self) -> bool:
        """No worker holds or loads it: its requests need a LOAD first."""
        return not self.replicas and not self.loading


class Placement:
    """The workers (`WorkerSlot`s) and models (`ModelSlot`s) the scheduler knows, by id and key."""

    def __init__(
        self,
        clock: Clock,
        *,
        fifo: bool = False,
        track_changes: bool = False,
        inline: bool = False,
        own_in_flight: bool = False,
    ) -> None:
        self.clock = clock
        #: The workers run their actions on the event loop that asks `busy_wait` (`--engine
        #: inline`): an action in flight has not started when asked, and runs before any other.
        self.inline = inline
        #: `busy_wait` counts what is left of a model's own batches in flight (its worker's
        #: timeline, `free_at`): for a worker that is a thread beside the loop that admits
        #: (`--inline-runs thread`), where a request admitted and then dropped costs that loop
        #: as much as one served, and the batch sent ahead waits in the thread's inbox.
        self.own_in_flight = own_in_flight
        #: Inline: the loop's turn of reads before each action runs (`Durations.turn`).
        self.turn = 0.0
        #: Queue order of new models: first come, first served instead of by deadline.
        self.fifo = fifo
        self.models: dict[str, ModelSlot] = {}
        self.workers: dict[int, WorkerSlot] = {}
        #: The actions sent and not yet finished, by id.
        self.inflight: dict[int, Dispatch] = {}
        #: With `track_changes`: the workers an action started or ended on since the caller
        #: last looked (and cleared it).
        self.changed: set[int] = set()
        self._track_changes = track_changes

    # -- membership ---------------------------------------------------------------------------
    def add_model(
        self,
        key: str,
        *,
        max_batch: int = 32,
        batch_delay: float = 0.0,
        max_queue: int = 4096,
        size_mb: float = 0.0,
        generation: Generation | None = None,
    ) -> None:
        """Register a model (its batching limits, queue bound and declared memory; a
        generative one's sequences), unplaced."""
        if key not in self.models:
            queue = DeadlineQueue(max_queue, fifo=self.fifo)
            self.models[key] = ModelSlot(
                key, queue, max_batch, batch_delay, AIMD(max_batch), size_mb=size_mb
            )
            if generation is not None:
                self.models[key].sequences = SequenceSlots(key, generation)

    def remove_model(self, key: str) -> ModelSlot | None:
        """Forget a model, releasing it on every worker; returns its slot (None: unknown)."""
        model = self.models.pop(key, None)
        if model is not None:
            for worker in self.workers.values():
                worker.release(key)
        return model

    def has_model(self, key: str) -> bool:
        return key in self.models

    def add_worker(self, worker: int, memory_mb: float | None = None) -> None:
        self.workers[worker] = WorkerSlot(worker, WorkerMemory(memory_mb), free_at=self.clock.now())

    def remove_worker(self, worker: int) -> tuple[WorkerSlot, list[ModelSlot]] | None:
        """A worker died: forget it and its actions in flight; returns its slot and the models
        it held or was loading (None: unknown)."""
        slot = self.workers.pop(worker, None)
        if slot is None:
            return None
        for dispatch in slot.inflight:
            self.inflight.pop(dispatch.id, None)
        held: list[ModelSlot] = []
        for model in self.models.values():
            if worker in model.replicas or worker in model.loading:
                held.append(model)
            model.replicas.discard(worker)
            model.loading.discard(worker)
        return slot, held

    # -- placing ------------------------------------------------------------------------------
    def placed(self, key: str, worker: int, size_mb: float | None = None) -> None:
        """`key` is now loaded on `worker` (`size_mb`: its measured memory, when known)."""
        slot = self.workers[worker]
        slot.models.add(key)
        model = self.models.get(key)
        if model is not None:
            model.replicas.add(worker)
            model.loading.discard(worker)
            if size_mb is not None:
                model.size_mb = size_mb
            slot.hold(key, model.size_mb, self.clock.now())

    def unplaced(self, key: str, worker: int) -> ModelSlot | None:
        """`key` is no longer held or loading on `worker`; returns its slot (None: unknown)."""
        slot = self.workers.get(worker)
        if slot is not None:
            slot.release(key)
        model = self.models.get(key)
        if model is not None:
            model.replicas.discard(worker)
            model.loading.discard(worker)
        return model

    def control(self, dispatch: Dispatch) -> None:
        """Queue a LOAD or UNLOAD on its worker; a LOAD marks its model loading there."""
        self.workers[dispatch.worker].control.append(dispatch)
        model = self.models.get(dispatch.model)
        if dispatch.kind == LOAD and model is not None:
            model.loading.add(dispatch.worker)

    # -- timelines ----------------------------------------------------------------------------
    def launch(self, worker: WorkerSlot, dispatch: Dispatch, now: float) -> None:
        """`dispatch` is on its way to `worker`: in flight until it finishes."""
        worker.start(dispatch, now)
        self.inflight[dispatch.id] = dispatch
        if self._track_changes:
            self.changed.add(worker.id)

    def finish(self, dispatch_id: int, now: float, seconds: float | None = None) -> Dispatch | None:
        """The action `dispatch_id` ended (done, failed or refused; `seconds`: how long it ran,
        as its worker measured); None if it is not in flight (its worker died meanwhile, or
        it was reported already)."""
        dispatch = self.inflight.pop(dispatch_id, None)
        if dispatch is None:
            return None
        worker = self.workers.get(dispatch.worker)
        if worker is not None:
            worker.finish(dispatch, now)
            if seconds is not None:
                ran = worker.ran_s
                ran[dispatch.model] = ran.get(dispatch.model, 0.0) + seconds
            if self._track_changes:
                self.changed.add(worker.id)
        return dispatch

    # -- questions ----------------------------------------------------------------------------
    def replicas(self, key: str) -> set[int]:
        model = self.models.get(key)
        return set(model.replicas) if model else set()

    def shares_workers(self, key: str) -> bool:
        """Whether a worker holding `key` holds another model too (whose requests a long run
        of `key` would hold up)."""
        model = self.models.get(key)
        if model is None:
            return False
        slots = (self.workers.get(w) for w in model.replicas | model.loading)
        return any(slot is not None and len(slot.models) > 1 for slot in slots)

    def busy_wait(self, model: ModelSlot, now: float, *, own: bool = True) -> float:
        """Predicted seconds until a live worker holding `model` is free of other models'
        actions (0: one is idle, or runs only `model`'s batches: those the queue check and
        the drop times account for, and under overload they must be kept fed, not second-
        guessed by a pessimistic estimate of the batch in flight). Inline, the batches in
        flight have not started (they run between turns of reads, and this is asked in one):
        all of each runs before a new request's, so their predicted time counts in full, each
        with a turn of reads (`turn`) before it. With `own_in_flight` (and `own`), what is
        left of `model`'s own batches in flight counts too."""
        key, wait = model.key, None
        for w in model.replicas:  # a loop, not generators: it runs on every request
            worker = self.workers.get(w)
            if worker is None or not worker.alive:
                continue
            for action in worker.inflight:
                if action.model != key:
                    busy = max(0.0, worker.free_at - now)
                    break
            else:
                if self.inline:
                    busy = sum(self.turn + (action.expected or 0.0) for action in worker.inflight)
                elif own and self.own_in_flight and worker.inflight:
                    busy = max(0.0, worker.free_at - now)
                else:
                    return 0.0  # a replica runs only this model's batches, or nothing
            wait = busy if wait is None or busy < wait else wait
        return 0.0 if wait is None else wait

    # -- statistics ---------------------------------------------------------------------------
    def busy_workers(self) -> int:
        return sum(1 for w in self.workers.values() if w.inflight)

    def worker_activity(self) -> dict[int, tuple[tuple[str, str] | None, dict[str, float]]]:
        """Per worker: the action it runs now, as (kind, model key) (None: idle), and the
        seconds its actions ran so far, by model key."""
        return {
            w.id: ((w.inflight[0].kind, w.inflight[0].model) if w.inflight else None, dict(w.ran_s))
            for w in self.workers.values()
        }

    def worker_memory(self) -> dict[int, tuple[float, float | None, int]]:
        """Per worker: (used MB, capacity MB, resident models)."""
        return {
            w.id: (w.memory.used_mb, w.memory.capacity_mb, len(w.memory.resident))
            for w in self.workers.values()
        }
