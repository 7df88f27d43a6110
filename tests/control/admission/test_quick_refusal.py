"""Refusals under overload decided before a request is decoded (`control.admission`).

Three reasons, each from O(1) state: the request waited too long to be read (`LATE`), its
model's queue refused a request due no earlier since the queue last shrank (`BACKLOG`,
admission's backlog summary: `Backlogs`), or the frontend is behind and the request waited
longest (`SHED`, CoDel on the read wait: `FrontendLag`). Times are seconds, written as milliseconds; the clock
is injected.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.admission.backlog import NO_BACKLOG, Backlog
from headway.control.admission.overload import (
    INTERVAL_S,
    MEMORY_S,
    MIN_SHARE,
    SHARE,
    TARGET_S,
    FrontendLag,
    quick_refusal,
)
from headway.control.admission.reasons import BACKLOG, LATE, SHED, Refusal
from headway.control.admission.unread import UnreadRefusals
from headway.control.controller import Controller
from headway.control.request import DEFAULT_PRIORITY, InferenceRequest
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import Backlogged, DeadlineUnmeetable
from headway.repository import Repository
from headway.testing import FakeEngine
from tests.control.helpers import ms, over, request, scheduler, seed, submit

# -- FrontendLag: CoDel on the frontend's read wait ------------------------------------------


def test_a_wait_above_the_target_sheds_only_once_it_lasted_an_interval() -> None:
    lag = FrontendLag()
    t = 10.0
    assert not lag.observe(ms(20), t)  # a stall: not overload yet
    assert not lag.observe(ms(20), t + INTERVAL_S / 2)
    assert lag.observe(ms(20), t + INTERVAL_S)  # above the target for a whole interval


def test_a_wait_within_the_target_stops_shedding_and_restarts_the_interval() -> None:
    lag = FrontendLag(memory=0.0)
    t = 10.0
    lag.observe(ms(20), t)
    assert lag.observe(ms(20), t + INTERVAL_S)
    assert not lag.observe(TARGET_S / 2, t + INTERVAL_S + ms(1))  # caught up
    assert not lag.observe(ms(20), t + INTERVAL_S + ms(2))  # a new interval starts
    assert not lag.observe(ms(20), t + 2 * INTERVAL_S)
    assert lag.observe(ms(20), t + 2 * INTERVAL_S + ms(3))


def test_the_lag_is_calm_until_a_wait_above_the_target_and_again_after_one_within_it() -> None:
    """While calm, observing a wait within the target changes nothing: the frontend skips it."""
    lag = FrontendLag(memory=0.0)
    assert lag.calm
    assert not lag.observe(ms(1), 10.0)
    assert lag.calm
    lag.observe(ms(20), 10.0)
    assert not lag.calm  # watching the interval: the next wait within it must be observed
    assert lag.observe(ms(20), 10.0 + INTERVAL_S)
    assert not lag.calm
    assert not lag.observe(ms(1), 10.0 + INTERVAL_S + ms(1))
    assert lag.calm


def test_a_short_stall_between_reads_within_the_target_never_sheds() -> None:
    lag = FrontendLag()
    t = 10.0
    for i in range(100):  # every other read above the target, for five intervals
        wait = ms(20) if i % 2 else ms(1)
        assert not lag.observe(wait, t + i * INTERVAL_S / 20)


def test_shedding_resumes_at_once_within_its_memory_of_the_last() -> None:
    lag = FrontendLag()
    t = 10.0
    lag.observe(ms(20), t)
    assert lag.observe(ms(20), t + INTERVAL_S)
    stopped = t + INTERVAL_S + ms(1)
    assert not lag.observe(ms(1), stopped)
    assert lag.observe(ms(20), stopped + ms(5))  # overload is back: no new interval
    assert not lag.observe(ms(1), stopped + ms(6))
    later = stopped + ms(6) + MEMORY_S + ms(1)  # long after: a stall again, not overload
    assert not lag.observe(ms(20), later)


def test_the_longer_shedding_lasts_the_smaller_the_share_of_a_deadline_that_sheds() -> None:
    """CoDel's control law: the share halves each interval of shedding, down to its floor, so
    a frontend that stays behind serves ever fresher requests until its reads keep up."""
    lag = FrontendLag()
    t = 10.0
    lag.observe(ms(20), t)
    assert lag.observe(ms(20), t + INTERVAL_S)
    assert lag.share == SHARE
    shares = []
    for step in range(1, 6):
        assert lag.observe(ms(20), t + INTERVAL_S + step * (INTERVAL_S + ms(1)))
        shares.append(lag.share)
    assert shares == [SHARE / 2, SHARE / 4, MIN_SHARE, MIN_SHARE, MIN_SHARE]
    assert MIN_SHARE == SHARE / 4


def test_a_lag_whose_floor_is_the_first_share_never_sheds_harder() -> None:
    lag = FrontendLag(min_share=SHARE)
    for step in range(6):
        lag.observe(ms(20), 10.0 + step * (INTERVAL_S + ms(1)))
    assert lag.shedding and lag.share == SHARE


def test_shedding_resumed_within_its_memory_keeps_its_share_and_a_new_episode_starts_over() -> None:
    lag = FrontendLag()
    t = 10.0
    for step in range(4):  # behind for three intervals: the share at its floor
        lag.observe(ms(20), t + step * (INTERVAL_S + ms(1)))
    assert lag.share == MIN_SHARE
    stopped = t + 3 * (INTERVAL_S + ms(1)) + ms(1)
    assert not lag.observe(ms(1), stopped)  # caught up for a moment
    assert lag.observe(ms(20), stopped + ms(2))  # behind again at once: as hard as before
    assert lag.share == MIN_SHARE
    assert not lag.observe(ms(1), stopped + ms(3))
    later = stopped + ms(3) + MEMORY_S + ms(1)  # long after: a new episode, from the start
    assert not lag.observe(ms(20), later)
    assert lag.observe(ms(20), later + INTERVAL_S + ms(1))
    assert lag.share == SHARE


# -- quick_refusal ----------------------------------------------------------------------------


NONE = NO_BACKLOG


def verdict(
    waited: float,
    *,
    timeout: float = ms(50),
    service: float | None = ms(2),
    backlog: Backlog = NONE,
    shedding: bool = False,
    share: float = SHARE,
) -> Refusal | None:
    arrived = 100.0
    return quick_refusal(
        waited=waited,
        timeout=timeout,
        service=service,
        deadline=arrived + timeout,
        backlog=backlog,
        shedding=shedding,
        share=share,
    )


def test_a_request_that_cannot_run_one_row_after_its_wait_is_late() -> None:
    assert verdict(ms(60)) == LATE  # its deadline passed while it waited
    assert verdict(ms(49)) == LATE  # 1 ms left; one row needs 2
    assert verdict(ms(47)) is None  # 3 ms left: admission decides
    assert verdict(ms(49), service=None) is None  # never measured: only what is already late
    assert verdict(ms(50), service=None) == LATE
    # too short for one row even unwaited: admission refuses it, saying what it needs
    assert verdict(ms(1), timeout=ms(1.5)) is None


def test_a_request_due_within_the_backlogs_deadlines_is_refused() -> None:
    # queued work due by 30 ms refused one due at 50 ms, behind another model's action
    band = Backlog(100.0 + ms(30), 100.0 + ms(50), float("-inf"))
    assert verdict(ms(1), backlog=band) == BACKLOG  # due at the same time
    assert verdict(ms(1), timeout=ms(40), backlog=band) == BACKLOG  # due earlier
    assert verdict(ms(1), timeout=ms(60), backlog=band) is None  # due later: more time
    assert verdict(ms(1), timeout=ms(20), backlog=band) is None  # ahead of queued work


def test_a_request_with_no_more_time_left_behind_the_same_work_is_refused() -> None:
    # behind only its own model's work, one with 45 ms left was refused
    work = Backlog(100.0 + ms(30), 100.0 + ms(40), ms(45))
    assert verdict(ms(6), backlog=work) == BACKLOG  # due later, with 44 ms left
    assert verdict(ms(10), timeout=ms(60), backlog=work) is None  # 50 ms left
    assert verdict(ms(1), timeout=ms(20), backlog=work) is None  # ahead of queued work


def test_while_shedding_only_requests_that_waited_longest_are_refused() -> None:
    assert verdict(ms(30), shedding=True) == SHED  # over the target and half of 50 ms
    assert verdict(ms(20), shedding=True) is None  # over the target, within half of 50 ms
    assert verdict(TARGET_S * 0.9, timeout=ms(8), shedding=True) is None  # within the target
    assert verdict(ms(30), timeout=1.0, shedding=True) is None  # a generous deadline waits
    assert verdict(ms(30)) is None  # not shedding: a wait alone is admission's business
    # shedding for longer, at a smaller share: a shorter wait sheds, never one within target
    assert verdict(ms(10), shedding=True, share=MIN_SHARE) == SHED  # over 1/8 of 50 ms
    assert verdict(ms(6), shedding=True, share=MIN_SHARE) is None
    assert verdict(TARGET_S, timeout=ms(20), shedding=True, share=MIN_SHARE) is None


# -- the scheduler's backlog summary ---------------------------------------------------------


def backlogged_model(clock: ManualClock) -> tuple[Scheduler, int]:
    """One worker busy with a batch of `m` (batches of 4, 10 ms), 8 rows due in 25 ms queued
    behind it; and the running batch's id."""
    s = scheduler(clock, {1: ["m"]}, max_batch=4)
    seed(s, "m", {1: ms(5), 2: ms(6), 4: ms(10)})
    s.submit(request(clock, "running", ms(100)))
    [running] = s.poll().dispatches
    for i in range(8):
        s.submit(request(clock, f"q{i}", ms(25)))
    return s, running.id


def test_a_refusal_for_the_work_ahead_is_kept_until_that_work_shrinks(
    clock: ManualClock,
) -> None:
    s, running = backlogged_model(clock)
    assert s.backlogs.of("m") == NONE
    refused = request(clock, "tight", ms(28))  # the 8 rows ahead: ~3 batches of 10 ms
    with pytest.raises(Backlogged, match="rows queued ahead"):
        s.submit(refused)
    assert s.backlogs.current  # some model is backlogged: the frontend must ask
    assert s.backlogs.of("m") == (clock.now() + ms(25), refused.deadline, ms(28))
    later = request(clock, "later", ms(29))
    with pytest.raises(Backlogged):
        s.submit(later)
    assert s.backlogs.of("m") == (clock.now() + ms(25), later.deadline, ms(29))  # widened
    clock.advance(ms(10))
    s.complete(running, ms(10))  # the running batch ends: the work ahead may shrink
    assert s.backlogs.of("m") == NONE  # admission decides again
    assert not s.backlogs.current  # no model is: the frontend need not ask


def test_a_refusal_of_the_request_alone_or_of_another_priority_is_not_a_backlog(
    clock: ManualClock,
) -> None:
    s, _ = backlogged_model(clock)
    with pytest.raises(DeadlineUnmeetable) as alone:
        s.submit(request(clock, "hopeless", ms(3)))  # one row needs 5 ms, whatever is ahead
    assert not isinstance(alone.value, Backlogged)
    assert s.backlogs.of("m") == NONE
    low = request(clock, "low", ms(28), priority=DEFAULT_PRIORITY + 5)  # behind everything
    with pytest.raises(Backlogged):
        s.submit(low)
    assert s.backlogs.of("m") == NONE  # says nothing of the default priority
    two = request(clock, "two rows", ms(28), rows=2)
    with pytest.raises(Backlogged):
        s.submit(two)
    assert s.backlogs.of("m") == NONE  # says nothing of one row


def test_behind_another_models_action_only_the_deadline_counts(clock: ManualClock) -> None:
    """Its worker busy with another model's 50 ms action: the wait shrinks as time passes, so
    a request is refused unread only if it is due no later than the one refused."""
    s = scheduler(clock, {1: ["m", "long"]}, max_batch=4)
    seed(s, "m", {1: ms(5)})
    seed(s, "long", {1: ms(50)})
    s.submit(request(clock, "long", ms(100), model="long"))
    assert s.poll().dispatches
    refused = request(clock, "m", ms(30))
    with pytest.raises(Backlogged, match="worker is busy"):
        s.submit(refused)
    assert s.backlogs.of("m") == (float("-inf"), refused.deadline, float("-inf"))


def test_sending_a_batch_ends_the_backlog_summary(clock: ManualClock) -> None:
    s, running = backlogged_model(clock)
    with pytest.raises(Backlogged):
        s.submit(request(clock, "tight", ms(28)))
    assert s.backlogs.of("m") != NONE
    s.complete(running, ms(10))
    with pytest.raises(Backlogged):
        s.submit(request(clock, "tight again", ms(27)))
    assert s.backlogs.of("m") != NONE
    assert s.poll().dispatches  # the next batch of 4 goes out
    assert s.backlogs.of("m") == NONE


# -- the controller: counted per model and reason --------------------------------------------

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
    "inputs: [{name: x, datatype: FP32, shape: [-1, 2]}]\n"
)


def test_the_controller_counts_each_quick_refusal_by_model_and_reason(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)
    repository = Repository.scan(tmp_path)

    async def scenario() -> None:
        clock = ManualClock(start=100.0)
        engine = FakeEngine(compute=lambda a, t: {"y": t["x"]}, duration=ms(2))
        controller = Controller(repository, engine, clock=clock)
        await controller.start()
        for _ in range(200):  # the warm-up runs answer on their own
            await asyncio.sleep(0)

        def screen(
            name: str, waited: float, timeout: float, priority: int | None = None
        ) -> Refusal | None:
            request = InferenceRequest(
                name, timeout=timeout, priority=priority, arrival=clock.now() - waited
            )
            return controller.screen(request)

        assert screen("nope", ms(1), ms(50)) is None
        # keeping up: a fresh request is left to admission, even one that cannot make its
        # deadline (admission says why); a stale one is refused unread
        assert screen("m", ms(0.2), ms(0.3)) is None
        assert screen("m", ms(60), ms(50)) is LATE
        assert screen("m", ms(60), ms(50)) is LATE
        assert screen("m", ms(1), ms(50)) is None
        # the frontend falls behind for longer than an interval: requests that waited long
        # are shed, at once
        for _ in range(3):
            clock.advance(INTERVAL_S / 2)
            last = screen("m", ms(40), ms(50))
        assert last is SHED
        # behind for longer still: a request that waited a fifth of its deadline is shed too
        assert screen("m", ms(10), ms(50)) is None
        for _ in range(4):
            clock.advance(INTERVAL_S / 2)
            last = screen("m", ms(10), ms(50))
        assert last is SHED
        # a priority of its own is left to admission
        assert screen("m", ms(60), ms(50), priority=1) is None
        counted = controller.model_statistics("m").counts
        assert counted.errors == {"deadline": 2, "shed": 2}
        events = controller.scheduler.events
        assert events["m@1", "refused_unread", LATE.reason] == 2
        assert events["m@1", "refused_unread", SHED.reason] == 2
        submitted = submit(controller, "m", {"x": np.zeros((1, 2), np.float32)})
        await controller.stop()
        submitted.exception()

    asyncio.run(scenario())


def test_the_transports_refusals_are_counted_in_bulk_before_any_read_and_each_turn(
    tmp_path: Path,
) -> None:
    """What the transports refuse (`Controller.screen`) is counted once per loop turn, not
    per request, yet every one is counted before the statistics are
    read, and none twice."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)

    async def scenario() -> None:
        clock = ManualClock(start=100.0)
        controller = Controller(Repository.scan(tmp_path), FakeEngine(), clock=clock)
        await controller.start()
        for _ in range(200):
            await asyncio.sleep(0)

        def refuse() -> Refusal | None:
            return controller.screen(
                InferenceRequest("m", timeout=ms(50), arrival=clock.now() - ms(60))
            )

        stats = controller.lifecycle.stats["m@1"]
        assert [refuse() for _ in range(3)] == [LATE] * 3
        assert stats.requests == 0  # not counted yet: in bulk
        counted = controller.model_statistics("m").counts
        assert counted.requests == 3 and counted.errors == {"deadline": 3}
        assert controller.scheduler.events["m@1", "refused_unread", LATE.reason] == 3
        assert refuse() == LATE
        clock.advance(0.0)  # the end of the turn it was refused in: counted
        assert stats.requests == 4 and stats.errors["deadline"] == 4
        controller.statistics()
        assert controller.scheduler.counters.refused_unread == 4
        await controller.stop()

    asyncio.run(scenario())


def screened(
    unread: UnreadRefusals, clock: ManualClock, waited: float, timeout: float
) -> Refusal | None:
    """`screen` of a request for `m` that waited `waited` s to be read, due `timeout` s after
    it arrived."""
    return unread.screen(InferenceRequest("m", timeout=timeout, arrival=clock.now() - waited))


# -- inline: admission's check of the work ahead, asked before decoding ----------------------


def test_behind_is_admissions_check_of_the_work_ahead_for_one_row(clock: ManualClock) -> None:
    """Before any request was refused (no backlog summary yet), the frontend can tell whether
    admission would refuse one row due at a deadline for the work ahead: exactly when a
    submitted one-row request is refused so."""
    s, _ = backlogged_model(clock)  # 8 rows queued behind a running batch of 10 ms
    unread = over(s, clock, inline=True)
    assert s.backlogs.of("m") == NONE
    assert unread.behind("m", clock.now() + ms(28), clock.now())  # ~3 batches of 10 ms ahead
    assert not unread.behind("m", clock.now() + ms(60), clock.now())
    for deadline_in in (ms(20), ms(28), ms(35), ms(45), ms(60)):
        refused = unread.behind("m", clock.now() + deadline_in, clock.now())
        try:
            s.submit(request(clock, "probe", deadline_in))
            submitted_refused = False
        except Backlogged:
            submitted_refused = True
        assert refused == submitted_refused, deadline_in
    assert not unread.behind("unknown", clock.now() + ms(1), clock.now())  # left to admission


@pytest.mark.parametrize(
    ("inline", "full_batch_ms", "shed_at_8_ms"),
    [(True, 1.0, True), (True, 10.0, False), (False, 10.0, True)],
)
def test_the_frontend_sheds_harder_the_longer_it_stays_behind_unless_runs_hold_the_loop(
    clock: ManualClock, inline: bool, full_batch_ms: float, shed_at_8_ms: bool
) -> None:
    """A frontend behind for a while sheds requests that waited over 1/8 of their deadline:
    a standing queue of reads must drain, or each request costs more with more connections
    at once and the frontend stays behind at a load it otherwise serves. Inline, a model
    whose full batch holds the loop for longer than BRIEF_RUN_S makes waits that long
    itself, and its requests are shed at the first share (1/2) only."""
    s = scheduler(clock, {1: ["m"]}, max_batch=4)
    seed(s, "m", {1: ms(0.5), 4: ms(full_batch_ms)})
    unread = over(s, clock, inline=inline)
    for _ in range(4):  # behind for longer than three intervals: the share at its least
        unread.lag.observe(ms(20), clock.now())
        clock.advance(INTERVAL_S + ms(1))
    assert unread.lag.shedding and unread.lag.share == MIN_SHARE  # 1/8 of 50 ms: 6.25 ms
    assert screened(unread, clock, ms(6), ms(50)) is None
    assert screened(unread, clock, ms(8), ms(50)) is (SHED if shed_at_8_ms else None)
    assert screened(unread, clock, ms(24), ms(50)) is (SHED if shed_at_8_ms else None)
    assert screened(unread, clock, ms(26), ms(50)) is SHED


def test_inline_a_request_admission_would_refuse_for_the_work_ahead_is_refused_unread(
    clock: ManualClock,
) -> None:
    """With the model on the event loop nothing ahead runs while the loop reads, so the first
    request that the queued work would make late is refused before it is decoded, not only
    those after a decoded refusal (the backlog summary): a decoded refusal costs the loop its
    decode, and the reads between two runs grow by it."""
    s, _ = backlogged_model(clock)  # 8 rows queued behind a running batch of 10 ms
    unread = over(s, clock, inline=True)
    assert screened(unread, clock, ms(2), ms(30)) is BACKLOG  # 8 rows and the batch ahead
    unread.count()
    assert unread.stats["m"].errors[DeadlineUnmeetable.reason] == 1
    assert s.events["m", "refused_unread", BACKLOG.reason] == 1
    assert screened(unread, clock, ms(2), ms(200)) is None
    worker = over(backlogged_model(clock)[0], clock, inline=False)  # left to admission
    assert screened(worker, clock, ms(2), ms(30)) is None
