"""Iteration-level batching of generative models, worked by hand on a manual clock: which
sequences each step runs and starts, the per-part schedule that new admissions never break,
the refusals at admission and the drops while waiting, priorities and withdrawals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.actions import STEP, Dispatch, StepPlan
from headway.control.engine import Reply
from headway.control.estimates.steps import REFIT_EVERY, StepProfile
from headway.control.jobs import Sequence
from headway.control.scheduling.scheduler import Scheduler
from headway.control.scheduling.steps import MAX_MARGIN, PROMISE_MEMORY
from headway.errors import DeadlineUnmeetable, PartTargetUnmeetable, SequencesFull
from headway.repository import REQUEST, Generation
from tests.control.helpers import Tag, ms

KEY = "gen@1"
numbers = itertools.count(1)


def generative(
    clock: ManualClock, *, max_sequences: int = 4, batching: str = "iteration", workers: int = 1
) -> Scheduler:
    """A scheduler with one generative model on `workers` workers whose steps take 10 ms plus
    2 ms per sequence (the profile seeded exactly, so predictions are those figures)."""
    s = Scheduler(clock)
    for worker in range(workers):
        s.placement.add_worker(worker)
    s.placement.add_model(KEY, generation=Generation(max_sequences, 100, batching))
    for worker in range(workers):
        s.placed(KEY, worker)
    for n in range(1, 9):
        for _ in range(3):
            s.step_estimates.observe(KEY, n, 0, 0, ms(10 + 2 * n))
    return s


def sequence(
    clock: ManualClock,
    tag: str,
    *,
    ttft: float = 1.0,
    tpot: float | None = None,
    cap: int = 100,
    priority: int = 10,
) -> Sequence:
    now = clock.now()
    return Sequence(KEY, {"x": np.zeros((1, 1))}, now, now + ttft, number=next(numbers),
                    cap=cap, units=0, tpot=tpot, priority=priority, receiver=Tag(tag))  # fmt: skip


def steps(decisions_dispatches: list[Dispatch]) -> list[Dispatch]:
    return [d for d in decisions_dispatches if d.kind == STEP]


def run_of(step: Dispatch) -> list[str]:
    assert isinstance(step.payload, StepPlan)
    return [str(s.receiver) for s in step.payload.run]


def reply(step: Dispatch, finished: tuple[str, ...] = ()) -> Reply:
    assert isinstance(step.payload, StepPlan)
    run = step.payload.run
    return {"id": step.id, "ok": True, "order": [s.number for s in run],
            "finished": [s.number for s in run if str(s.receiver) in finished], "failed": []}  # fmt: skip


def finish(s: Scheduler, clock: ManualClock, step: Dispatch, *finished: str) -> None:
    """The worker ran `step` for its predicted time and answered, `finished` ending."""
    clock.advance(step.expected or 0.0)
    done = s.complete(step.id, step.expected)
    assert done is step
    s.stepped(step, reply(step, finished))


def poll_step(s: Scheduler) -> Dispatch:
    [step] = steps(s.poll().dispatches)
    return step


def test_a_new_sequence_joins_at_the_next_step_and_a_finished_one_leaves_at_once(
    clock: ManualClock,
) -> None:
    s = generative(clock)
    s.submit(sequence(clock, "a"))
    s.submit(sequence(clock, "b"))
    first = poll_step(s)
    assert run_of(first) == ["a", "b"] and [str(r.receiver) for r in first.requests] == ["a", "b"]
    assert first.expected == pytest.approx(ms(14))
    s.submit(sequence(clock, "c"))  # arrives while the step runs
    assert not steps(s.poll().dispatches)  # one step at a time on a worker
    finish(s, clock, first, "a")
    second = poll_step(s)
    assert run_of(second) == ["b", "c"]  # a left, c joined: the batch never drained
    assert [str(r.receiver) for r in second.requests] == ["c"]


def test_request_level_batching_holds_new_sequences_until_the_batch_drains(
    clock: ManualClock,
) -> None:
    s = generative(clock, batching=REQUEST)
    s.submit(sequence(clock, "a", ttft=10.0))
    first = poll_step(s)
    s.submit(sequence(clock, "b", ttft=10.0))
    finish(s, clock, first)
    second = poll_step(s)
    assert run_of(second) == ["a"]  # b waits, a slot free: a still runs
    finish(s, clock, second, "a")
    assert run_of(poll_step(s)) == ["b"]


def test_a_new_sequence_never_puts_a_running_stream_behind_its_per_part_target(
    clock: ManualClock,
) -> None:
    s = generative(clock)
    # a stream that must get a part every 13 ms: a step of one takes 12, of two 14
    s.submit(sequence(clock, "tight", tpot=ms(13)))
    first = poll_step(s)
    finish(s, clock, first)
    s.submit(sequence(clock, "new", ttft=5.0))
    second = poll_step(s)
    assert run_of(second) == ["tight"]  # a step of two would make its part late
    finish(s, clock, second)
    # each 12 ms step gains it 1 ms on its schedule; once it has 2 ms in hand, new joins
    for _ in range(5):
        step = poll_step(s)
        if "new" in run_of(step):
            break
        finish(s, clock, step)
    assert run_of(step) == ["tight", "new"]
    [tight] = [r for r in step.payload.run if str(r.receiver) == "tight"]  # type: ignore[union-attr]
    assert clock.now() + ms(14) <= tight.due()


def test_admission_refuses_a_first_part_that_cannot_arrive_in_time(clock: ManualClock) -> None:
    s = generative(clock)
    with pytest.raises(DeadlineUnmeetable, match="first part cannot arrive within 10 ms"):
        s.submit(sequence(clock, "hopeless", ttft=ms(10)))  # a step alone takes 12 ms
    with pytest.raises(PartTargetUnmeetable, match="raise tpot_ms"):
        s.submit(sequence(clock, "too-fast", tpot=ms(11)))
    s.submit(sequence(clock, "fine", ttft=ms(20), tpot=ms(13)))
    events = s.statistics().events
    assert events[KEY, "rejected_at_admission", "deadline"] == 1
    assert events[KEY, "rejected_at_admission", "tpot"] == 1


def test_a_full_memory_bound_queues_or_refuses_by_when_a_slot_frees(clock: ManualClock) -> None:
    s = generative(clock, max_sequences=2)
    s.submit(sequence(clock, "a", cap=10))
    s.submit(sequence(clock, "b", cap=50))
    finish(s, clock, poll_step(s))
    # both slots taken: the first frees after a's 9 more parts of 14 ms, about 126 ms
    with pytest.raises(SequencesFull, match="its 2 sequences per worker"):
        s.submit(sequence(clock, "late", ttft=ms(100)))
    s.submit(sequence(clock, "waits", ttft=ms(200)))
    for _ in range(9):
        step = poll_step(s)
        assert run_of(step) == ["a", "b"]
        finish(s, clock, step, *(("a",) if step.payload.run[0].made == 9 else ()))  # type: ignore[union-attr]
    assert run_of(poll_step(s)) == ["b", "waits"]


def test_the_sequences_waiting_ahead_take_the_slots_in_turn(clock: ManualClock) -> None:
    s = generative(clock, max_sequences=2)
    s.submit(sequence(clock, "a", cap=10))
    s.submit(sequence(clock, "b", cap=50))
    finish(s, clock, poll_step(s))
    # a's slot frees first (about 126 ms); b's only after its 49 more parts (about 690 ms)
    s.submit(sequence(clock, "waits", cap=5, ttft=ms(200)))
    # waits holds a's slot for its 5 parts (to about 200 ms), long before b ends: the next
    # one gets that slot in time, not b's; it holds it for 20 parts (to about 480 ms)
    s.submit(sequence(clock, "next", cap=20, ttft=ms(300)))
    with pytest.raises(SequencesFull):
        s.submit(sequence(clock, "behind", cap=5, ttft=ms(400)))
    # more waiting than slots: admitted all the same when their turn comes in time
    for tag in ("c", "d", "e"):
        s.submit(sequence(clock, tag, cap=5, ttft=2.0))


def test_a_deep_queue_is_judged_by_its_work_and_not_scanned_at_each_decision(
    clock: ManualClock,
) -> None:
    s = generative(clock, max_sequences=2)
    s.submit(sequence(clock, "a", cap=10))
    s.submit(sequence(clock, "b", cap=10))
    finish(s, clock, poll_step(s))
    for n in range(100):  # 100 waiting ahead, 5 parts each: about 3.6 s of steps on 2 slots
        s.submit(sequence(clock, f"w{n}", cap=5, ttft=60.0, priority=1))
    with pytest.raises(SequencesFull):
        s.submit(sequence(clock, "behind", cap=5, ttft=2.0))
    s.submit(sequence(clock, "behind", cap=5, ttft=5.0))
    predictions = []
    predict = s.step_estimates.predict

    def counted(*args: int) -> float | None:
        predictions.append(args)
        return predict(*args)

    s.step_estimates.predict = counted  # type: ignore[method-assign]
    for _ in range(5):
        finish(s, clock, poll_step(s))
    assert len(predictions) < 20  # not one per waiting sequence per step


def test_request_level_admission_counts_the_batches_ahead(clock: ManualClock) -> None:
    s = generative(clock, max_sequences=2, batching=REQUEST)
    s.submit(sequence(clock, "a", cap=10))
    s.submit(sequence(clock, "b", cap=20))
    finish(s, clock, poll_step(s))
    # the batch drains when b ends (19 more parts of 14 ms, about 270 ms); the next batch
    # (w1, w2) runs its longest, 20 parts: a third waits for both batches
    s.submit(sequence(clock, "w1", cap=20, ttft=ms(400)))
    s.submit(sequence(clock, "w2", cap=5, ttft=ms(400)))
    with pytest.raises(SequencesFull):
        s.submit(sequence(clock, "w3", cap=5, ttft=ms(500)))
    s.submit(sequence(clock, "w3", cap=5, ttft=ms(700)))


def test_a_free_slot_goes_to_the_highest_priority_first(clock: ManualClock) -> None:
    s = generative(clock, max_sequences=1)
    s.submit(sequence(clock, "running", cap=2))
    finish(s, clock, poll_step(s))
    s.submit(sequence(clock, "low", ttft=5.0, priority=20))
    s.submit(sequence(clock, "high", ttft=5.0, priority=1))
    finish(s, clock, poll_step(s), "running")
    assert run_of(poll_step(s)) == ["high"]


def test_a_withdrawn_sequence_is_stopped_with_the_next_step(clock: ManualClock) -> None:
    s = generative(clock, max_sequences=2)
    a, b = sequence(clock, "a"), sequence(clock, "b")
    s.submit(a)
    s.submit(b)
    finish(s, clock, poll_step(s))
    assert s.withdraw(a) is False  # running, not queued: stopped at the next step
    waiting = sequence(clock, "waiting", ttft=5.0)
    s.submit(waiting)
    step = poll_step(s)
    assert isinstance(step.payload, StepPlan)
    assert step.payload.stops == [a.number]
    assert run_of(step) == ["b", "waiting"]  # its slot was free at once
    later = sequence(clock, "later", ttft=5.0)
    s.submit(later)
    assert s.withdraw(later) is True  # still waiting: it leaves the queue
    assert s.queue_length(KEY) == 0


def test_a_waiting_sequence_is_dropped_once_its_first_part_cannot_arrive(
    clock: ManualClock,
) -> None:
    s = generative(clock, max_sequences=1)
    s.submit(sequence(clock, "long", cap=100))
    finish(s, clock, poll_step(s))
    # admitted: the slot frees in time if long ends early (it may, before its cap)
    s.submit(waiting := sequence(clock, "waiting", ttft=3.0))
    latest = waiting.deadline - ms(12)  # the last moment a step alone brings it in time
    wake = s.poll().wakeup
    assert wake is not None
    while wake < latest - 1e-9:  # an earlier look (the queue is not scanned each time)
        clock.advance(wake - clock.now())
        decisions = s.poll()
        assert not decisions.rejected and decisions.wakeup is not None
        wake = decisions.wakeup
    assert wake == pytest.approx(latest)
    clock.advance(wake - clock.now() + 1e-6)
    dropped = s.poll().rejected
    assert [(str(j.receiver), e.reason) for j, e in dropped] == [("waiting", "deadline")]


def test_a_waiting_sequence_looked_at_its_latest_start_is_looked_at_again_after(
    clock: ManualClock,
) -> None:
    # at its latest start it may still start; the next look must be later, or a clock that
    # moves only to the next wake (the simulated server's) stays there for ever
    s = generative(clock, max_sequences=1)
    s.submit(sequence(clock, "long", cap=100))
    finish(s, clock, poll_step(s))
    s.submit(sequence(clock, "waiting", ttft=3.0))
    wake = s.poll().wakeup
    for _ in range(100):
        assert wake is not None
        clock.advance(wake - clock.now())
        decisions = s.poll()
        if decisions.rejected:
            break
        assert decisions.wakeup is not None and decisions.wakeup > clock.now()
        wake = decisions.wakeup
    assert [str(j.receiver) for j, _ in decisions.rejected] == ["waiting"]


def slowed(s: Scheduler, clock: ManualClock, *, slower: float, turn: float, steps: int,
           arrivals: int = 0, ttft: float = ms(150), cap: int = 5,
           stall: float = 0.0) -> tuple[int, int, int]:  # fmt: skip
    """Run the worker's steps on a machine that slowed: each takes `slower` times the seeded
    profile's 10 ms plus 2 ms per sequence, and the event loop takes `turn` seconds from a
    step's end to the next step (its parts delivered), and every twelfth step stalls for
    `stall` seconds more. A new sequence of 5 parts is offered
    at each of the first `arrivals` steps. Returns (admitted, dropped before a first part,
    first parts late)."""
    admitted = dropped = late = 0
    for n in range(steps):
        if n < arrivals:
            try:
                s.submit(sequence(clock, f"w{n}", cap=cap, ttft=ttft))
                admitted += 1
            except SequencesFull:
                pass
        decisions = s.poll()
        dropped += len(decisions.rejected)
        [step] = steps_of = [d for d in decisions.dispatches if d.kind == STEP]
        assert steps_of
        assert isinstance(step.payload, StepPlan)
        actual = slower * ms(10 + 2 * len(step.payload.run)) + (stall if n % 12 == 11 else 0.0)
        clock.advance(actual)
        s.complete(step.id, actual)
        run = step.payload.run
        late += sum(1 for r in run if r.made == 0 and clock.now() > r.deadline)
        s.stepped(step, reply(step, tuple(str(r.receiver) for r in run if r.made + 1 >= r.cap)))
        clock.advance(turn)
    return admitted, dropped, late


def busy_model(clock: ManualClock) -> Scheduler:
    """Three slots, one taken by a stream far from its end (the others free only as the
    offered sequences end), and a full window of steps measured before the machine slowed."""
    s = generative(clock, max_sequences=3)
    for i in range(256):  # a step's cost does not depend on its length
        n = 1 + i % 3
        s.step_estimates.observe(KEY, n, (i * 37) % 400, 0, ms(10 + 2 * n))
    s.submit(sequence(clock, "long", cap=10_000))
    return s


def test_admitted_sequences_keep_their_first_part_when_the_steps_slow_down(
    clock: ManualClock,
) -> None:
    s = busy_model(clock)
    # the machine slows: steps take half as long again as the window measured
    slowed(s, clock, slower=1.5, turn=0.0, steps=8)
    admitted, dropped, late = slowed(s, clock, slower=1.5, turn=0.0, steps=80, arrivals=40)
    assert admitted > 5
    assert (dropped, late) == (0, 0)


def test_admission_counts_the_loop_turn_between_steps(clock: ManualClock) -> None:
    s = busy_model(clock)
    # each step runs as predicted, but the loop takes 8 ms to deliver its parts and start the
    # next one
    slowed(s, clock, slower=1.0, turn=ms(8), steps=8)
    admitted, dropped, late = slowed(s, clock, slower=1.0, turn=ms(8), steps=80, arrivals=40)
    assert admitted > 5
    assert (dropped, late) == (0, 0)


def test_a_step_profile_follows_its_recent_steps() -> None:
    profile = StepProfile()
    for _ in range(256):
        profile.observe(4, 0, 0, ms(10))
    for _ in range(8):
        profile.observe(4, 0, 0, ms(20))
    predicted = profile.predict(4, 0)
    assert predicted is not None and predicted >= ms(20) * 0.95


def test_a_step_profile_asked_between_steps_follows_a_slow_step_at_once() -> None:
    profile = StepProfile()
    for _ in range(64):
        profile.observe(4, 0, 0, ms(10))
        profile.predict(4, 0)  # the scheduler asks between every two steps
    for _ in range(4):  # an eighth of the last steps: past the share predictions cover
        profile.observe(4, 0, 0, ms(40))
        slowed = profile.predict(4, 0)
    assert slowed is not None and slowed > ms(10) * 1.5


def test_a_step_profile_is_fitted_again_only_every_few_steps_while_they_keep_to_it() -> None:
    profile = StepProfile()
    fits = 0
    refit = profile._refit

    def counted() -> tuple[np.ndarray, float, float, float]:
        nonlocal fits
        fits += 1
        return refit()

    profile._refit = counted  # type: ignore[method-assign]
    for _ in range(8 + 4 * REFIT_EVERY):
        profile.observe(4, 0, 0, ms(10))
        profile.predict(4, 0)
    assert fits == 5  # the first prediction, then once every REFIT_EVERY steps
    for _ in range(REFIT_EVERY):  # faster steps are followed within REFIT_EVERY of them
        profile.observe(4, 0, 0, ms(5))
        profile.predict(4, 0)
    faster = profile.typical(4, 0)
    assert faster is not None and faster < ms(10)


def test_admission_counts_the_steps_growing_as_the_waiting_fill_the_slots(
    clock: ManualClock,
) -> None:
    s = generative(clock)  # 4 slots; a step of one takes 12 ms, of four 18 ms
    s.submit(sequence(clock, "a", cap=30))
    finish(s, clock, poll_step(s))
    for tag in ("l1", "l2", "l3"):  # they take the free slots: a's 29 parts come in steps of 4
        s.submit(sequence(clock, tag, cap=1000, ttft=5.0, priority=1))
    # a's slot frees after 29 steps of 18 ms (about 520 ms), not of 12 ms (about 350 ms)
    with pytest.raises(SequencesFull):
        s.submit(sequence(clock, "next", cap=5, ttft=ms(450)))
    s.submit(waits := sequence(clock, "waits", cap=5, ttft=ms(600)))
    while waits.first_at is None:
        decisions = s.poll()
        assert not decisions.rejected
        [step] = steps(decisions.dispatches)
        finish(s, clock, step, *(("a",) if step.payload.run[0].made == 29 else ()))  # type: ignore[union-attr]
    assert waits.first_at <= waits.deadline


def test_admission_stretches_its_promises_by_how_long_waits_turned_out(
    clock: ManualClock,
) -> None:
    s = busy_model(clock)
    # every twelfth step stalls for 100 ms: too rare for a step's estimate, but a wait for a
    # slot spans many steps; the first promises broken teach admission its margin
    slowed(s, clock, slower=1.0, turn=0.0, steps=300, arrivals=150, ttft=ms(300), cap=10,
           stall=ms(100))  # fmt: skip
    admitted, dropped, late = slowed(s, clock, slower=1.0, turn=0.0, steps=300, arrivals=150,
                                     ttft=ms(300), cap=10, stall=ms(100))  # fmt: skip
    assert admitted > 10
    assert (dropped, late) == (0, 0)
    assert s.steps.margin > 1.0


def test_the_first_waits_of_an_overload_are_promised_as_cautiously_as_its_slow_steps(
    clock: ManualClock,
) -> None:
    s = generative(clock, max_sequences=3)
    for i in range(256):  # the window: every twelfth step stalled for 200 ms
        n = 1 + i % 3
        s.step_estimates.observe(KEY, n, (i * 37) % 400, 0, ms(10 + 2 * n + 200 * (i % 12 == 11)))
    s.submit(sequence(clock, "long", cap=10_000))
    # an overload starts on the same machine: no promise has been weighed yet, so none has
    # taught admission its margin before the first waits are admitted
    admitted, dropped, late = slowed(s, clock, slower=1.0, turn=0.0, steps=120, arrivals=60,
                                     ttft=ms(300), cap=10, stall=ms(200))  # fmt: skip
    assert admitted > 5
    assert (dropped, late) == (0, 0)


def test_a_broken_promise_stops_holding_admission_back_once_it_is_old(
    clock: ManualClock,
) -> None:
    """The margin a stall's broken promises teach admission (`Steps.margin`) fades: the same
    sequence it refuses a second after is admitted once they are PROMISE_MEMORY old."""
    s = generative(clock, max_sequences=1)
    s.submit(sequence(clock, "long", cap=10))
    finish(s, clock, poll_step(s))
    # promised the slot when long ends (9 more parts); a more urgent one admitted after it
    # takes the slot first and holds it 50 parts: its wait turns out about six times as long
    s.submit(sequence(clock, "broken", cap=1, ttft=5.0))
    s.submit(sequence(clock, "urgent", cap=50, ttft=5.0, priority=1))
    while s.queue_length(KEY):
        step = poll_step(s)
        assert isinstance(step.payload, StepPlan)
        finish(s, clock, step, *(str(r.receiver) for r in step.payload.run if r.made + 1 >= r.cap))
    weighed = clock.now()  # broken's first part came: its promise is weighed now
    s.submit(sequence(clock, "holder", cap=20))
    step = poll_step(s)
    assert run_of(step) == ["holder"]
    finish(s, clock, step)  # 19 more parts: the slot frees in about 230 ms

    def probe() -> None:  # a first part due in 400 ms: after the slot frees, alone in time
        s.submit(sequence(clock, "probe", cap=5, ttft=ms(400)))

    clock.advance(weighed + 1.0 - clock.now())
    assert s.steps.margin_at(KEY, clock.now()) == MAX_MARGIN
    with pytest.raises(SequencesFull):
        probe()  # its wait stretched by the broken promise's margin
    clock.advance(PROMISE_MEMORY)  # nothing ran meanwhile: only the promise aged
    assert s.steps.margin_at(KEY, clock.now()) == pytest.approx(1.0)
    probe()
