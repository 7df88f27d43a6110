"""One model must not starve another on a shared worker: a request that cannot wait out another
model's long action is refused at arrival, not held to its deadline and then refused.

The issue's case: one worker holds a fast model (1 ms) and one that takes 600 ms; while the
slow one runs, a fast request with 150 ms to go was queued and answered 503 "deadline passed
while queued" 150 ms later, though the scheduler knew at arrival that the worker was busy for
550 ms more. Times are seconds, written as milliseconds; the clock is injected.
"""

from __future__ import annotations

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.jobs import Job
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import DeadlineUnmeetable
from tests.control.helpers import Tag, ms, scheduler, seed


def request(clock: ManualClock, model: str, deadline_in: float) -> Job:
    now = clock.now()
    return Job(model, {"x": np.zeros((1, 4))}, 1, now, now + deadline_in, receiver=Tag(model))


def shared(
    clock: ManualClock,
    placements: dict[int, list[str]],
    *,
    inline: bool = False,
    own_in_flight: bool = False,
) -> Scheduler:
    """Workers, their models, and each model's measured duration (fast: 1 ms, slow: 600 ms);
    `inline`: they run on the event loop that admits (`--engine inline`); `own_in_flight`: in
    a thread beside it (`--inline-runs thread`)."""
    s = scheduler(clock, placements, inline=inline, own_in_flight=own_in_flight)
    for keys in placements.values():
        for key in keys:
            seed(s, key, {1: ms(600) if key == "slow" else ms(1)})
    return s


def test_a_request_behind_another_models_long_action_is_refused_at_arrival(
    clock: ManualClock,
) -> None:
    s = shared(clock, {1: ["fast", "slow"]})
    s.submit(request(clock, "slow", 1.0))
    [long_run] = s.poll().dispatches
    clock.advance(ms(50))
    with pytest.raises(DeadlineUnmeetable, match=r"busy for ~550\.0 ms more"):
        s.submit(request(clock, "fast", ms(150)))
    s.submit(request(clock, "fast", ms(600)))  # it can wait out the 550 ms: admitted
    assert s.poll().dispatches == []
    clock.advance(ms(550))
    s.complete(long_run.id, ms(600))
    [next_run] = s.poll().dispatches
    assert next_run.model == "fast"


def test_a_models_own_batch_in_flight_is_left_to_the_queue_check(clock: ManualClock) -> None:
    """Under overload a model's worker is always busy with its own batches, each predicted by
    a pessimistic p99: admission counts the rows queued ahead, and the drop time decides
    whether a request waited too long (a batch that ends early lets it run)."""
    s = shared(clock, {1: ["slow"]})
    s.submit(request(clock, "slow", 1.0))
    assert len(s.poll().dispatches) == 1  # busy with its own 600 ms batch
    clock.advance(ms(50))
    s.submit(request(clock, "slow", ms(700)))  # admitted; it must start by 150 ms
    clock.set(ms(151))
    [(dropped, error)] = s.poll().rejected  # its own batch ran on: dropped, never late
    assert dropped.deadline == pytest.approx(ms(750))
    assert "deadline passed while queued" in str(error)


def test_inline_a_models_own_batch_in_flight_counts_in_full_at_admission(
    clock: ManualClock,
) -> None:
    """With the model on the event loop, a batch in flight has not started while the loop
    reads (it runs between turns of reads): all of it runs before a request read now, so one
    that cannot wait it out is refused at arrival, not decoded, queued and dropped later (the
    case above, which admits it, drops it 100 ms on). The refusal is remembered as a backlog,
    so the next such request is refused before it is decoded."""
    s = shared(clock, {1: ["slow"]}, inline=True)
    s.submit(request(clock, "slow", 1.0))
    assert len(s.poll().dispatches) == 1
    clock.advance(ms(50))
    with pytest.raises(DeadlineUnmeetable, match=r"busy for ~600\.0 ms more"):
        s.submit(request(clock, "slow", ms(700)))
    clock.advance(ms(10))  # the loop reads on; the batch still waits for the turn to end
    backlog = s.backlogs.of("slow")
    assert backlog.left == pytest.approx(ms(700))  # what the refused one had: no less
    s.submit(request(clock, "slow", ms(1300)))  # it can wait the batch out: admitted


def test_beside_the_loop_what_is_left_of_a_models_own_batches_counts_at_admission(
    clock: ManualClock,
) -> None:
    """With the model in a thread beside the event loop that admits, a request that cannot wait
    out what is left of the model's own batches in flight (and the one sent ahead to wait in
    the thread's inbox) is refused at arrival, not decoded, queued and dropped later at the
    same loop's cost (the worker-process case above admits it). The refusal is remembered as a
    backlog of this model's own work, so the next such request is refused before decoding."""
    s = shared(clock, {1: ["slow"]}, own_in_flight=True)
    s.submit(request(clock, "slow", 1.0))
    assert len(s.poll().dispatches) == 1
    clock.advance(ms(50))
    with pytest.raises(DeadlineUnmeetable, match=r"busy for ~550\.0 ms more"):
        s.submit(request(clock, "slow", ms(700)))
    assert s.backlogs.of("slow").left == pytest.approx(ms(700))
    clock.advance(ms(100))
    s.submit(request(clock, "slow", ms(1100)))  # 450 ms left of the batch, then its own 600
    with pytest.raises(DeadlineUnmeetable, match=r"busy for ~450\.0 ms more"):
        s.submit(request(clock, "slow", ms(1000)))


def test_an_idle_replica_takes_the_request_whatever_the_busy_one_runs(clock: ManualClock) -> None:
    s = shared(clock, {1: ["fast", "slow"], 2: ["fast"]})
    s.submit(request(clock, "slow", 1.0))
    [long_run] = s.poll().dispatches
    assert long_run.worker == 1
    s.submit(request(clock, "fast", ms(150)))
    [fast_run] = s.poll().dispatches
    assert fast_run.worker == 2


def test_a_model_shares_workers_when_one_of_its_workers_holds_another(clock: ManualClock) -> None:
    s = shared(clock, {1: ["fast", "slow"], 2: ["alone"]})
    assert s.placement.shares_workers("fast") and s.placement.shares_workers("slow")
    assert not s.placement.shares_workers("alone") and not s.placement.shares_workers("unknown")
