"""Iteration-level batching of generative models (Orca, OSDI'22): the next step on a worker,
and what a finished step changes.

A generative model's worker advances every sequence it holds by one part per step, and the
batch is formed again for every step: a sequence that made its last part has left it, and a
waiting one joins the next step, without waiting for the batch to drain. One action per step
per worker, whatever the number of sequences in it: the hop is per step, never per part.

Which waiting sequences a step starts, in queue order (priority, then first-part deadline),
while a slot is free (`Generation.max_sequences` per worker, the memory bound):
- one whose first part cannot arrive in time even from this step is dropped, with the
  reason (as Clockwork drops a request it can no longer serve in time);
- one joins only if the longer step it makes still delivers every running stream's next part
  by its schedule (`Sequence.due`: its first part's deadline, then one `tpot` per part after
  the first), or no later than the step without it would: a new admission never puts a
  running stream behind its per-part target. Otherwise it waits for a later step;
- under request-level batching (`batching: request`, the baseline) none joins a worker
  that still holds sequences.

The next step is sent as soon as a step's reply is read, and its parts are delivered while
the worker runs it (`dispatch.relay`); what is left between a step's end and the next step
sent (the reply's wait for the event loop, the loop's other work: `Steps.turn`, the recent
90th percentile) is part of every stream's time from one part to the next, beside the step
and its round trip, and admission counts it.

Admission's promise to a sequence that waits for a slot (`Sequence.promised`, its first
part's predicted arrival) rests on many steps predicted one by one, and what no step's
estimate holds (a stall of the machine, a slot freed later than its steps said) adds up over
them. So each such sequence's first part (or its drop) is compared with its promise, and the
high percentile of the recent ratios of the wait it had to the wait it was promised
(`Steps.margin`, at least 1) stretches the next promises: a promise that was not kept makes
admission keep fewer, rather than admitting sequences that will be dropped. A promise is
weighed only once its first part is due, and a sudden stall breaks the promises of all those
admitted in the meantime at once (the first waits of an overload among them): so the margin is
never below the model's step spread (`StepProfile.spread`: its slow steps over its typical
one), as if every step of the wait might be a slow one.

A withdrawn sequence is stopped (its state freed on the worker) with the next step there, and
its slot is free from the moment it is withdrawn.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from headway.control.actions import STEP, Decisions, Dispatch, StepPlan, Tally, earliest
from headway.control.admission.reasons import DROPPED
from headway.control.engine import Reply
from headway.control.estimates.durations import Durations, RecentP90
from headway.control.estimates.steps import StepEstimates
from headway.control.jobs import Job, Sequence
from headway.control.placement.queues import DeadlineQueue
from headway.control.placement.sequences import SequenceSlots
from headway.control.placement.slots import ModelSlot, WorkerSlot
from headway.errors import DeadlineUnmeetable
from headway.repository import REQUEST


@dataclass
class StepOutcome:
    """What one finished step made: each sequence's part (its row of the step's outputs, and
    the seconds since its arrival for a first part, else since its part before), those that
    ended with it, and those it failed (each with the worker's error)."""

    parts: list[tuple[Sequence, int, bool, float]] = field(default_factory=list)
    ended: list[Sequence] = field(default_factory=list)
    failed: list[tuple[Sequence, str]] = field(default_factory=list)


#: Turns between steps kept for `Steps.turn`.
TURN_WINDOW = 64
#: Promises kept for `Steps.margin`, the percentile of their ratios taken, and the most a
#: promise is stretched.
PROMISE_WINDOW = 64
PROMISE_QUANTILE = 99.0
MAX_MARGIN = 3.0
#: Seconds a weighed promise counts towards the margin: a stall's broken promises stop
#: holding admission back once they are this old.
PROMISE_MEMORY = 10.0


class Steps:
    """Forms each generative model's steps and follows them (see the module docstring).
    `numbers` numbers the actions (shared with the scheduler's other actions)."""

    def __init__(
        self,
        models: Mapping[str, ModelSlot],
        durations: Durations,
        estimates: StepEstimates,
        tally: Tally,
        numbers: Iterator[int],
    ) -> None:
        self._models = models
        self.durations = durations
        self.estimates = estimates
        self._count = tally.count
        self._numbers = numbers
        #: Generative models with sequences waiting for a slot.
        self.waiting: set[str] = set()
        #: No waiting sequence becomes hopeless before this (`drop_hopeless` looks again
        #: then, or after one more waits): a deep queue is not scanned at every decision.
        self._drop_at = float("-inf")
        self._sequence_numbers = itertools.count(1)
        self._turns = RecentP90(TURN_WINDOW)
        #: Seconds from a step's end to the next step sent on its worker, while sequences
        #: run there (what the loop did meanwhile): the recent 90th percentile.
        self.turn = 0.0
        self._promises = RecentP90(PROMISE_WINDOW, PROMISE_QUANTILE)
        #: How much longer than promised the recent waits for a slot were (see the module
        #: docstring): admission stretches a wait it promises by this (`margin_at`).
        self.margin = 1.0

    def waits(self, model: ModelSlot, sequence: Sequence) -> None:
        """`sequence` was queued in `model`'s queue (admitted, or again after its worker
        died): it waits for a slot, and is dropped when it can no longer start in time."""
        model.queue.push(sequence)
        self.waiting.add(model.key)
        latest = self._latest(model.key, sequence)
        self._drop_at = min(self._drop_at, float("-inf") if latest is None else latest)

    def _latest(self, key: str, sequence: Sequence) -> float | None:
        """The last moment `sequence` can join a step alone and still make its first part in
        time; None while its model's steps are not profiled."""
        step = self.estimates.predict(key, 1, sequence.units, sequence.units)
        return None if step is None else sequence.deadline - step - self.durations.overhead

    def _kept(self, sequence: Sequence, now: float) -> None:
        """`sequence`'s first part came (or it was dropped) at `now`: weigh its promise."""
        promised = sequence.promised
        if promised is None or promised <= sequence.arrival:
            return
        sequence.promised = None
        ratio = (now - sequence.arrival) / (promised - sequence.arrival)
        self.margin = min(max(self._promises.add(ratio, now), 1.0), MAX_MARGIN)

    def margin_at(self, key: str, now: float) -> float:
        """The margin on a wait `key`'s model promises at `now` (see the module docstring)."""
        if self._promises.forget_before(now - PROMISE_MEMORY):
            self.margin = min(max(self._promises.value, 1.0), MAX_MARGIN)
        return min(max(self.margin, self.estimates.spread(key) or 1.0), MAX_MARGIN)

    def new_number(self) -> int:
        """A number for a new sequence, unique in this controller (the worker's name for it)."""
        return next(self._sequence_numbers)

    # -- the next step on a worker -------------------------------------------------------------
    def most_urgent(self, worker: WorkerSlot) -> tuple[float, ModelSlot] | None:
        """The generative model on `worker` whose next step there is the most urgent (by when
        its most urgent part is due), with that moment; None: none holds, stops or awaits a
        sequence there, or each has its step in flight."""
        best: tuple[float, ModelSlot] | None = None
        for key in worker.models:
            model = self._models.get(key)
            if model is None or model.sequences is None or model.sequences.busy(worker.id):
                continue
            urgency = self._urgency(model, model.sequences, worker.id)
            if urgency is not None and (best is None or urgency < best[0]):
                best = (urgency, model)
        return best

    def _urgency(self, model: ModelSlot, slots: SequenceSlots, worker: int) -> float | None:
        held = slots.running.get(worker)
        if held:
            return min(s.due() for s in held)
        if slots.stops.get(worker):
            return float("inf")
        head = model.queue.peek()
        return None if head is None else head.deadline

    def step(
        self, worker: WorkerSlot, model: ModelSlot, now: float, decisions: Decisions
    ) -> Dispatch | None:
        """The next step of `model` on `worker` (see the module docstring), or None when it
        has nothing to run or stop there."""
        slots = model.sequences
        assert slots is not None
        held = slots.on(worker.id)
        ended = slots.ended.get(worker.id)
        if held and ended is not None:
            self.turn = self._turns.add(now - ended, now)
        starting = self._starting(worker, model, slots, held, now, decisions)
        stops = slots.take_stops(worker.id)
        if not held and not starting and not stops:
            return None
        run = [*held, *starting]
        context = sum(s.context for s in held) + sum(s.units for s in starting)
        prefill = sum(s.units for s in starting)
        plan = StepPlan(run, stops, len(run), context, prefill)
        for sequence in starting:
            slots.start(worker.id, sequence)
        dispatch = Dispatch(
            next(self._numbers), -1, STEP, model.key, list(starting), len(starting), payload=plan
        )
        if run:
            dispatch.expected = self.estimates.predict(model.key, len(run), context, prefill)
        slots.stepping[worker.id] = dispatch
        if not model.queue:
            self.waiting.discard(model.key)
        return dispatch

    def _starting(
        self,
        worker: WorkerSlot,
        model: ModelSlot,
        slots: SequenceSlots,
        held: list[Sequence],
        now: float,
        decisions: Decisions,
    ) -> list[Sequence]:
        """The waiting sequences this step starts, taken from the queue."""
        if slots.generation.batching == REQUEST and held:
            return []
        queue = model.queue
        start = max(now, worker.free_at)
        overhead = self.durations.overhead
        room = slots.capacity - len(held)
        context = sum(s.context for s in held)
        starting: list[Sequence] = []
        prefill = 0
        without = self.estimates.predict(model.key, len(held), context) if held else 0.0
        while room > 0 and queue:
            head = queue.peek()
            assert isinstance(head, Sequence)
            n = len(held) + len(starting) + 1
            step = self.estimates.predict(
                model.key, n, context + prefill + head.units, prefill + head.units
            )
            if step is None or without is None:  # not profiled: it joins
                starting.append(self._pop(queue))
                prefill += head.units
                room -= 1
                continue
            arrives = start + step + overhead
            if arrives > head.deadline:  # too late even from this step: dropped
                self._drop(model, self._pop(queue), now, decisions)
                continue
            floor = start + without + overhead
            if any(arrives > max(s.due(), floor) for s in held) or any(
                arrives > s.deadline for s in starting
            ):
                break  # it would put a running stream behind: a later step
            starting.append(self._pop(queue))
            prefill += head.units
            without = step
            room -= 1
        return starting

    @staticmethod
    def _pop(queue: DeadlineQueue) -> Sequence:
        sequence = queue.pop()
        assert isinstance(sequence, Sequence)
        return sequence

    def _drop(self, model: ModelSlot, sequence: Job, now: float, decisions: Decisions) -> None:
        if isinstance(sequence, Sequence):
            self._kept(sequence, now)  # at least this late: it could no longer make it
        waited = (now - sequence.arrival) * 1e3
        error = DeadlineUnmeetable(
            f"model {model.key.rpartition('@')[0]!r}: dropped after waiting {waited:.0f} ms for "
            "a sequence slot: its first part can no longer arrive in time; retry with "
            "backoff, or raise ttft_ms"
        )
        decisions.rejected.append((sequence, error))
        self._count(model.key, DROPPED, error.reason)

    # -- sequences that can no longer start in time --------------------------------------------
    def drop_hopeless(self, now: float, decisions: Decisions) -> float | None:
        """Drop the waiting sequences whose first part can no longer arrive in time, even
        joining a step alone now; returns when to look again (the next such moment)."""
        if now < self._drop_at:
            return self._drop_at
        wake: float | None = None
        for key in sorted(self.waiting):
            model = self._models.get(key)
            if model is None or not model.queue:
                self.waiting.discard(key)
                continue
            doomed: set[int] = set()
            for sequence in model.queue:
                assert isinstance(sequence, Sequence)
                latest = self._latest(key, sequence)
                if latest is None:
                    continue
                if now > latest:
                    doomed.add(id(sequence))
                else:  # looked at again just after its latest: at it, it may still start
                    wake = earliest(wake, math.nextafter(latest, math.inf))
            for sequence in model.queue.remove_if(doomed):
                self._drop(model, sequence, now, decisions)
            if not model.queue:
                self.waiting.discard(key)
        self._drop_at = float("inf") if wake is None else wake
        return wake

    # -- a step ended ----------------------------------------------------------------------------
    def stepped(self, dispatch: Dispatch, reply: Reply | None, now: float) -> StepOutcome:
        """`dispatch` ended: with `reply` (its `order`, `finished`, `failed`), or failed as a
        whole (None: every sequence it ran fails). Updates each sequence and frees the slots
        of those that ended."""
        outcome = StepOutcome()
        model = self._models.get(dispatch.model)
        plan = dispatch.payload
        assert isinstance(plan, StepPlan)
        slots = None if model is None else model.sequences
        if slots is not None:
            slots.stepping.pop(dispatch.worker, None)
            slots.ended[dispatch.worker] = now
        if reply is None:
            for sequence in plan.run:
                if slots is not None:
                    slots.end(sequence)
                outcome.failed.append((sequence, ""))
            return outcome
        numbered = {s.number: s for s in plan.run}
        finished = set(reply.get("finished") or ())
        for row, number in enumerate(reply.get("order") or ()):
            found = numbered.get(number)
            if found is None:
                continue
            sequence = found
            first = sequence.first_at is None
            since = now - (sequence.arrival if first else sequence.last_at)
            if first:
                sequence.first_at = now
                self._kept(sequence, now)
            sequence.last_at = now
            sequence.made += 1
            outcome.parts.append((sequence, row, first, since))
            if number in finished:
                if slots is not None:
                    slots.end(sequence)
                outcome.ended.append(sequence)
        for number, error in reply.get("failed") or ():
            lost = numbered.get(number)
            if lost is not None:
                if slots is not None:
                    slots.end(lost)
                outcome.failed.append((lost, str(error)))
        return outcome

    def learn(self, dispatch: Dispatch, duration: float) -> None:
        """Fold a step's measured `duration` into its model's step profile (unless it ran a
        cold sequence: a warm-up's first)."""
        plan = dispatch.payload
        assert isinstance(plan, StepPlan)
        if plan.run and all(s.measured for s in plan.run):
            self.estimates.observe(
                dispatch.model, plan.sequences, plan.context, plan.prefill, duration
            )

    # -- workers and models that go ----------------------------------------------------------------
    def worker_lost(
        self, worker: int, held: list[ModelSlot], retries: int
    ) -> tuple[list[Job], list[Job]]:
        """`worker` died: the sequences it held are lost with their state. One that had made
        no part yet waits again (once, as a request does); the rest fail. Returns (waiting
        again, failed)."""
        again: list[Job] = []
        failed: list[Job] = []
        for model in held:
            slots = model.sequences
            if slots is None:
                continue
            for sequence in slots.lose(worker):
                sequence.attempts += 1
                if sequence.made == 0 and sequence.attempts <= retries and not sequence.stopping:
                    sequence.worker = -1
                    self.waits(model, sequence)
                    again.append(sequence)
                else:
                    failed.append(sequence)
        return again, failed

    def running(self, model: ModelSlot) -> list[Job]:
        """Every sequence of `model` held on a worker (to fail when it goes)."""
        slots = model.sequences
        if slots is None:
            return []
        held: list[Job] = [s for on in slots.running.values() for s in on]
        slots.running.clear()
        slots.stepping.clear()
        slots.stops.clear()
        return held
