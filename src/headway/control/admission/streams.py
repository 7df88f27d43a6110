"""Whether a generative model's new sequence is admitted: its two targets, judged at once.

Clockwork's rule carried over to streams (DistServe's two targets): refuse now what cannot
be served in time, rather than start it late. A sequence is refused when

- its per-part target is below what one step of the model takes with it alone
  (`PartTargetUnmeetable`): no schedule could keep it;
- its first part cannot arrive by its deadline (`SequencesFull` when that is because every
  slot is taken until after it, else `DeadlineUnmeetable`). The first part comes from the
  first step that starts it, once a slot is free for it: the model's `max_sequences` per
  worker, fewer where the per-part targets of the streams running there allow fewer per step.
  A running sequence frees its slot at the latest when it has made its `cap` parts, each step
  predicted from the step profile (`estimates.steps`) as it will be: the slots filled by the
  sequences waiting, and the event loop's turn between steps counted in the `overhead` beside
  the round trip; the sequences waiting ahead of it take
  the slots as they free, in queue order, each holding one for its own `cap` parts. Under
  request-level batching no sequence joins a worker before all of its running ones ended: the
  waiting ones start in batches, each when the one before drained. The steps of a wait for a
  slot are predicted as typical steps (`StepProfile.typical`), the step that makes the first
  part by its tail estimate, as a wait for batches ahead is for single answers
  (`Durations.finish_time`); the wait is stretched by `margin`: how much longer than promised
  the recent ones were, and no less than the steps' spread (`scheduling.steps`).

Until a model's steps are profiled, its sequences are admitted (a queued one whose first part
can no longer arrive in time is dropped when that becomes so: `scheduling.steps`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from headway.control.actions import Tally
from headway.control.admission.reasons import REJECTED_AT_ADMISSION
from headway.control.estimates.steps import StepEstimates
from headway.control.jobs import Sequence
from headway.control.placement.sequences import SequenceSlots
from headway.control.placement.slots import ModelSlot, Placement
from headway.errors import (
    DeadlineUnmeetable,
    HeadwayError,
    Overloaded,
    PartTargetUnmeetable,
    SequencesFull,
)
from headway.repository import REQUEST


def name_of(key: str) -> str:
    return key.rpartition("@")[0] or key


def decode_step(
    steps: StepEstimates,
    key: str,
    sequences: int,
    context: int,
    overhead: float,
    *,
    typical: bool = False,
) -> float | None:
    """Seconds from one part to the next for a step of `sequences` sequences `context` units
    long in all, as a stream sees it: the step and the round trip. By the step's tail
    estimate, or (`typical`) as one of many in a sum."""
    step = (steps.typical if typical else steps.predict)(key, sequences, context)
    return None if step is None else step + overhead


def capacity_within(
    steps: StepEstimates, slots: SequenceSlots, context: float, tpot: float | None, overhead: float
) -> int:
    """How many sequences one step may hold and still take no longer than `tpot` (None: no
    target), each about `context` units long: at most the model's `max_sequences`, at least 1."""
    most = slots.capacity
    if tpot is None:
        return most
    while most > 1:
        step = decode_step(steps, slots.key, most, int(most * context), overhead)
        if step is None or step <= tpot:
            break
        most -= 1
    return most


def held_for(
    steps: StepEstimates, key: str, held: Sequence, sequences: int, context: int, overhead: float
) -> float:
    """Seconds until the running `held` has made its last part at the latest: its steps left,
    each of `sequences` sequences `context` units long in all. (Not grown by a unit per step:
    the profile's cost per unit, fitted over the lengths its window measured, is no guide far
    beyond them.)"""
    step = decode_step(steps, key, sequences, context, overhead, typical=True)
    return max(held.cap - held.made, 0) * (step or 0.0)


@dataclass
class Replica:
    """One worker of the model, as admission sees it: when each of its slots is free at the
    latest (`frees`), when its next step can start, the seconds to a joining sequence's first
    part and from one part to the next with its slots full, and how many slots its streams'
    per-part targets allow."""

    frees: list[float]
    start: float
    join: float
    step: float
    room: int


def first_part_at(
    model: ModelSlot,
    sequence: Sequence,
    now: float,
    *,
    steps: StepEstimates,
    placement: Placement,
    overhead: float,
) -> tuple[float, bool] | None:
    """When `sequence`'s first part is predicted to arrive at the latest if admitted now, and
    whether it must wait for a running sequence to end for a slot; None while the model's
    steps are not profiled."""
    slots = model.sequences
    assert slots is not None
    key = model.key
    request_level = slots.generation.batching == REQUEST
    replicas: list[Replica] = []
    for worker_id in sorted(model.replicas):
        worker = placement.workers.get(worker_id)
        if worker is None or not worker.alive:
            continue
        held = slots.running.get(worker_id, [])
        context = sum(s.context for s in held)
        start = max(now, worker.free_at)
        step = decode_step(steps, key, max(len(held), 1), context, overhead)
        join = steps.predict(key, len(held) + 1, context + sequence.units, sequence.units)
        if step is None or join is None:
            return None
        tpots = [s.tpot for s in held if s.tpot is not None]
        if sequence.tpot is not None:
            tpots.append(sequence.tpot)
        mean = (context + sequence.units) / (len(held) + 1)
        room = capacity_within(steps, slots, mean, min(tpots) if tpots else None, overhead)
        full = decode_step(steps, key, room, int(room * mean), overhead, typical=True) or step
        # the waiting fill the free slots (each step then holds `room`, if more than now; none
        # joins a batch under request-level batching): a held one's steps are those steps
        busy = len(held) if request_level else max(len(held), room)
        base = max(context, int(busy * mean))
        ends = sorted(start + held_for(steps, key, s, busy, base, overhead) for s in held)
        if request_level and held:
            frees = [ends[-1]] * room  # the batch drains before any joins
        else:
            # free now beyond those held; then one more as each held one ends, once fewer
            # than `room` are left
            frees = [start] * max(room - len(held), 0) + ends[max(len(held) - room, 0) :]
        replicas.append(Replica(frees, start, join + overhead, full, room))
    if not replicas:
        return None  # not placed yet (loading): its queue waits for the load
    join = max(r.join for r in replicas)
    first_start = min(r.start for r in replicas)
    # the sequences waiting ahead of it take the slots in turn, each for its parts
    first, rest = waiting_caps(model, sequence) if model.queue else ([], [])
    slot = (rounds if request_level else turns)(replicas, first, rest)
    return slot + join, slot > first_start + 1e-9


#: How many of the sequences waiting ahead are placed one by one, in queue order; the rest
#: (a deep queue) count by their total work, so a judgement stays cheap however deep.
PLACED_AHEAD = 32


def waiting_caps(model: ModelSlot, sequence: Sequence) -> tuple[list[int], list[int]]:
    """The most parts of each sequence queued ahead of `sequence`: the first PLACED_AHEAD in
    the order they start, and the rest in no order."""
    key = (sequence.priority, sequence.deadline)
    last = model.queue.last
    everyone = last is not None and key >= last  # the usual case: all queued are ahead
    ahead = [
        (job.priority, job.deadline, job.seq, job.cap)
        for job in model.queue
        if isinstance(job, Sequence) and (everyone or (job.priority, job.deadline) <= key)
    ]
    if len(ahead) <= PLACED_AHEAD:
        ahead.sort()
        return [cap for *_, cap in ahead], []
    first = heapq.nsmallest(PLACED_AHEAD, ahead)
    placed = {entry[2] for entry in first}
    return [cap for *_, cap in first], [e[3] for e in ahead if e[2] not in placed]


def turns(replicas: list[Replica], caps: list[int], rest: list[int]) -> float:
    """Iteration-level: each sequence ahead takes the slot that frees first and holds it for
    its parts; when the slot that frees after them all is free (the `rest`, after `caps`,
    spread evenly over the slots by their work)."""
    heap = [(f, i) for i, r in enumerate(replicas) for f in r.frees]
    heapq.heapify(heap)
    if not heap:
        return float("inf")
    for cap in caps:
        free, i = heapq.heappop(heap)
        replica = replicas[i]
        heapq.heappush(heap, (free + replica.join + max(cap - 1, 0) * replica.step, i))
    if not rest:
        return heap[0][0]
    join = sum(r.join for r in replicas) / len(replicas)
    step = sum(r.step for r in replicas) / len(replicas)
    work = len(rest) * (join - step) + sum(rest) * step
    return max(heap[0][0], (sum(f for f, _ in heap) + work) / len(heap))


def rounds(replicas: list[Replica], caps: list[int], rest: list[int]) -> float:
    """Request-level: the sequences ahead (`caps` in order, then `rest`) start in batches of
    a replica's room, each batch when the one before drained, running as long as its
    longest; when the batch that takes `sequence` starts."""
    heap = [(max(r.frees, default=r.start), i) for i, r in enumerate(replicas) if r.room]
    heapq.heapify(heap)
    if not heap:
        return float("inf")
    left = [*caps, *rest]
    at = 0
    while True:
        begins, i = heapq.heappop(heap)
        replica = replicas[i]
        batch = left[at : at + replica.room]
        at += replica.room
        if len(batch) < replica.room:
            return begins  # room left in this batch: it joins it
        longest = max(batch)
        heapq.heappush(heap, (begins + replica.join + max(longest - 1, 0) * replica.step, i))


def admit_sequence(
    model: ModelSlot,
    sequence: Sequence,
    now: float,
    *,
    steps: StepEstimates,
    placement: Placement,
    overhead: float,
    margin: float = 1.0,
    tally: Tally,
) -> None:
    """Admit `sequence` (return) or raise why not, counting the refusal (see the module
    docstring)."""
    try:
        refuse(
            model, sequence, now, steps=steps, placement=placement, overhead=overhead, margin=margin
        )
    except HeadwayError as exc:
        tally.count(model.key, REJECTED_AT_ADMISSION, exc.reason)
        raise


def refuse(
    model: ModelSlot,
    sequence: Sequence,
    now: float,
    *,
    steps: StepEstimates,
    placement: Placement,
    overhead: float,
    margin: float = 1.0,
) -> None:
    key = model.key
    name = name_of(key)
    if model.queue.full:
        raise Overloaded(
            f"model {name!r}: {len(model.queue)} sequences wait for a slot (its max_queue); "
            "retry with backoff"
        )
    if sequence.tpot is not None:
        alone = decode_step(steps, key, 1, sequence.units + 1, overhead)
        if alone is not None and alone > sequence.tpot:
            raise PartTargetUnmeetable(
                f"model {name!r}: a part every {sequence.tpot * 1e3:.1f} ms cannot be kept: one "
                f"step takes {alone * 1e3:.1f} ms with this sequence alone; raise tpot_ms"
            )
    found = first_part_at(model, sequence, now, steps=steps, placement=placement, overhead=overhead)
    if found is None:
        return
    first, waits = found
    if waits:  # a wait for a slot is stretched by how long such waits turned out
        sequence.promised = first
        first = now + (first - now) * margin
    if first <= sequence.deadline:
        return
    budget = (sequence.deadline - now) * 1e3
    if waits:
        slots = model.sequences
        assert slots is not None
        raise SequencesFull(
            f"model {name!r}: its {slots.capacity} sequences per worker (max_sequences, its "
            f"memory bound) are taken, and none frees in time for a first part within "
            f"{budget:.0f} ms; retry with backoff, or raise ttft_ms"
        )
    raise DeadlineUnmeetable(
        f"model {name!r}: the first part cannot arrive within {budget:.0f} ms (its first step "
        f"takes {(first - now) * 1e3:.0f} ms); raise ttft_ms"
    )
