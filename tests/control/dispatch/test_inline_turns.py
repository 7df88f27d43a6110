"""With `--engine inline` a batch runs on the event loop, between turns of reads: each round of
batches ahead of a new request takes its run and the turn of reads before it, and admission
counts both, or under overload it admits requests that the queue then drops (decoded, queued
and refused late, at several times the cost of a refusal before decoding). Times are seconds,
written as milliseconds; the clock is injected.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import uvloop

from headway.api.turns import BACK_TO_BACK_S, ReadTurns
from headway.clock import LoopClock, ManualClock, TimerClock
from headway.control.dispatch.relay import Relay
from headway.control.engine import Reply, Tensors
from headway.control.request import FutureReceiver, Prediction
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import Backlogged, ModelError
from headway.runtime.engines.inline import LOOP, InlineEngine
from headway.testing import FakeEngine
from tests.control.helpers import awaited, ms, over, request, scheduler, seed


def inline_model(clock: TimerClock) -> Scheduler:
    """One inline worker with model `m`: batches of 4 rows, 5 ms for one row, 10 ms for 4."""
    s = scheduler(clock, {1: ["m"]}, max_batch=4, inline=True)
    seed(s, "m", {1: ms(5), 4: ms(10)})
    return s


async def on_the_loop() -> tuple[LoopClock, Scheduler, InlineEngine, Relay]:
    """`inline_model` served by the real inline engine, its runs on the running loop."""
    clock = LoopClock()
    s = inline_model(clock)
    engine = InlineEngine(runs=LOOP)
    await engine.start()
    relay = Relay(s, engine, clock)
    relay.loop = asyncio.get_running_loop()
    return clock, s, engine, relay


def run_next(s: Scheduler, clock: ManualClock, reads: float) -> None:
    """A turn of reads of `reads` s, then the next batch in flight runs for 10 ms and is
    answered (a full batch may have been sent ahead of it: it runs after the next turn)."""
    clock.advance(reads)
    s.poll()
    [batch, *_] = s.placement.workers[1].inflight
    clock.advance(ms(10))
    s.complete(batch.id, ms(10))


def test_the_turn_of_reads_between_two_runs_while_work_waits_is_measured(
    clock: ManualClock,
) -> None:
    s = inline_model(clock)
    for i in range(12):
        s.submit(request(clock, f"r{i}", ms(500)))
    run_next(s, clock, 0.0)  # 8 rows still wait when it ends
    assert s.durations.turn == 0.0
    run_next(s, clock, ms(12))  # a 12 ms turn of reads before the second batch
    assert s.durations.turn == pytest.approx(ms(12))
    run_next(s, clock, ms(12))
    assert s.durations.turn == pytest.approx(ms(12))


def test_an_idle_pause_between_runs_is_not_a_turn_of_reads(clock: ManualClock) -> None:
    s = inline_model(clock)
    s.submit(request(clock, "alone", ms(500)))
    run_next(s, clock, 0.0)  # nothing waits when it ends
    s.submit(request(clock, "later", ms(500)))
    run_next(s, clock, ms(100))  # the loop slept until it came
    assert s.durations.turn == 0.0


def test_inline_admission_counts_a_turn_of_reads_before_each_batch_ahead(
    clock: ManualClock,
) -> None:
    """Once turns of 12 ms were measured, a batch of 4 in flight (it runs after this turn)
    delays a new request by 12 + 10 ms, and a full batch queued ahead of it by as much
    again: what the loop will do before it, not the runs alone."""
    s = inline_model(clock)
    for i in range(12):
        s.submit(request(clock, f"r{i}", ms(500)))
    run_next(s, clock, 0.0)
    run_next(s, clock, ms(12))  # the turn is measured; the last 4 rows went ahead in flight
    assert len(s.placement.workers[1].inflight) == 1
    with pytest.raises(Backlogged, match=r"busy for ~22\.0 ms more"):
        s.submit(request(clock, "tight", ms(25)))  # 10 + 5 ms of runs: admitted before
    assert over(s, clock, inline=True).behind("m", clock.now() + ms(25), clock.now())
    for i in range(4):
        s.submit(request(clock, f"q{i}", ms(45)))  # a full batch queued, due first
    with pytest.raises(Backlogged, match="4 rows queued ahead"):
        s.submit(request(clock, "behind", ms(48)))  # 22 + 22 + 5 ms; runs alone: 25 ms
    s.submit(request(clock, "enough", ms(60)))


def test_the_worker_engines_rounds_have_no_turn_of_reads(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=4)
    seed(s, "m", {1: ms(5), 4: ms(10)})
    for i in range(12):
        s.submit(request(clock, f"r{i}", ms(500)))
    run_next(s, clock, 0.0)
    run_next(s, clock, ms(12))
    assert s.durations.turn == 0.0 and s.placement.turn == 0.0


def test_inline_a_long_turn_of_reads_chooses_no_batch_before_it_ends(clock: ManualClock) -> None:
    """A worker process hears replies and gets its next batch during a long turn of reads
    (`Relay.catch_up`); inline, a batch chosen then would only run once the turn ends,
    later than chosen for and without the rows read since, so none is chosen."""

    async def scenario() -> int:
        s = inline_model(clock)
        engine = FakeEngine()
        engine.runs_inline = True
        engine.holds_loop = True
        relay = Relay(s, engine, clock)
        relay.loop = asyncio.get_running_loop()
        s.submit(request(clock, "read", ms(500)))
        relay.kick()  # its pump comes once the turn of reads is over
        relay.catch_up()  # deep in that turn
        return len(s.placement.inflight)

    assert asyncio.run(scenario()) == 0


def test_the_turn_follows_the_recent_turns_however_many_came_before(clock: ManualClock) -> None:
    """The turn is the 90th percentile of a window of recent turns, refreshed as new ones come
    in: long after the window first filled, longer turns still raise it."""
    s = inline_model(clock)
    for _ in range(200):
        s.durations.observe_turn(ms(1))
    assert s.durations.turn == pytest.approx(ms(1))
    for _ in range(64):
        s.durations.observe_turn(ms(15))
    assert s.durations.turn == pytest.approx(ms(15))


def test_inline_a_batch_chosen_once_a_turn_of_reads_ends_runs_before_the_next_turn() -> None:
    """The pump chooses a batch once a turn of reads is over (`Relay.kick`). When the
    inline engine was idle, that batch must run then, not after the loop's next turn of reads:
    it would start a turn later than chosen for (under overload, a turn is milliseconds), and
    the rows read in that turn would wait for the batch after it. The real engine on a real
    loop; its worker holds no model, so the batch fails at once, and its request is answered."""

    async def scenario() -> bool:
        loop = asyncio.get_running_loop()
        clock, s, engine, relay = await on_the_loop()
        engine.on_message = relay.on_reply
        answered = loop.create_future()
        read = request(clock, "read", ms(500))
        read.receiver = FutureReceiver(answered)
        reader, writer = socket.socketpair()
        ran_before_the_next_read: asyncio.Future[bool] = loop.create_future()

        def next_turn_of_reads() -> None:
            loop.remove_reader(reader)
            reader.recv(1)
            ran_before_the_next_read.set_result(answered.done())

        try:
            s.submit(read)
            relay.kick()  # this turn of reads is over: choose the batch
            loop.add_reader(reader, next_turn_of_reads)
            writer.send(b"x")  # bytes for the next turn
            ran = await ran_before_the_next_read
            await answered if answered.done() else asyncio.sleep(0)
        except ModelError:  # the batch's failure: its worker holds no model `m`
            pass
        finally:
            reader.close()
            writer.close()
            await engine.stop()
        if answered.done():
            answered.exception()
        return ran

    assert asyncio.run(scenario())


@pytest.mark.parametrize(
    ("batch_of_4", "answered"),
    [(ms(0.5), 8), (ms(10), 0)],  # two full batches ran inside the reads; none did
)
def test_inline_a_brief_full_batch_runs_inside_the_read_that_filled_it(
    batch_of_4: float, answered: int
) -> None:
    """Under overload one turn of reads reads several batches' worth. On the loop a batch ran
    only after each turn, so every batch past the first waited a whole turn more, and
    admission, counting those turns, refused what came behind them unread. A full batch now
    runs inside the read that fills it, and the turn reads on, if it is brief: a batch of
    milliseconds is what the loop spends its time on, and the rest of the turn is better read
    first. The real engine on a real loop; its worker holds no model, so each batch fails at
    once, answering its requests."""

    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        clock = LoopClock()
        s = scheduler(clock, {1: ["m"]}, max_batch=4, inline=True)
        seed(s, "m", {1: batch_of_4 / 2, 4: batch_of_4})
        engine = InlineEngine(runs=LOOP)
        await engine.start()
        relay = Relay(s, engine, clock)
        relay.loop = loop
        engine.on_message = relay.on_reply
        futures: list[asyncio.Future[Prediction]] = []
        try:
            for i in range(10):  # ten reads of one turn: no loop turn between them
                read = request(clock, f"r{i}", ms(500))
                futures.append(awaited(read))
                s.submit(read)
                relay.run_full_batch("m")
            done = sum(f.done() for f in futures)
            queued = s.queue_length("m")
        finally:
            await engine.stop()
        for future in futures:
            if future.done():
                assert isinstance(future.exception(), ModelError)
        return done, queued

    assert asyncio.run(scenario()) == (answered, 10 - answered)


def test_inline_a_read_late_after_a_run_dates_its_bytes_from_before_the_run() -> None:
    """After a run on the loop, the loop answers and goes on to read without sleeping; on a
    busy machine it may not be given a core for milliseconds first. What it then reads may
    have waited all through the run, so it counts from the turn of reads before the run,
    however late it is read (it counted from the read itself, fresh, and the frontend never
    saw itself behind). Once the engine has nothing more to run, the loop may sleep, and a
    read after that counts from itself again. The real engine on uvloop, the server's loop."""

    class Host:
        def __init__(self, engine: InlineEngine) -> None:
            self.engine = engine

        @property
        def loop_held_until(self) -> float:
            return self.engine.held_until

    async def scenario() -> tuple[float, float, float, float]:
        loop = asyncio.get_running_loop()
        clock, s, engine, relay = await on_the_loop()
        reader, writer = socket.socketpair()

        def replied(worker: int, header: Reply, tensors: Tensors) -> None:
            writer.send(b"x")  # arrived during the run: read after it
            loop.add_reader(reader, read_late)
            relay.on_reply(worker, header, tensors)

        engine.on_message = replied
        turns = ReadTurns()
        turns.loop, turns.app = loop, Host(engine)  # type: ignore[assignment]
        read = request(clock, "read", ms(500))
        answer = awaited(read)
        dated: asyncio.Future[tuple[float, float]] = loop.create_future()

        def read_late() -> None:
            loop.remove_reader(reader)
            reader.recv(1)
            time.sleep(4 * BACK_TO_BACK_S)  # the loop is not given a core for a while
            now = time.monotonic()
            dated.set_result((now, turns.arrived_since(now)))

        try:
            before = time.monotonic()
            turns.arrived_since(before)  # the turn of reads that brought the request
            s.submit(read)
            relay.kick()  # once that turn is over, its batch runs
            now, since = await dated
            await asyncio.sleep(0.05)  # nothing more to run: the loop sleeps
            later = time.monotonic()
            later_since = turns.arrived_since(later)
        finally:
            reader.close()
            writer.close()
            await engine.stop()
        if answer.done():
            answer.exception()  # the batch's failure: its worker holds no model `m`
        assert now - before > 4 * BACK_TO_BACK_S
        return before, since, later, later_since

    before, since, later, later_since = uvloop.run(scenario())
    assert since == before  # not fresh: it may have arrived just after that turn began
    assert later_since == later


def test_inline_a_request_read_before_a_runs_follow_up_is_queued_not_run_alone() -> None:
    """Under overload the loop runs a batch, answers it, then reads what came meanwhile: the
    first of those finds its model's queue empty and, once answering took longer than half a
    run, the scheduler finds the model idle. But the engine holds the loop until the run's
    follow-up, which comes after this turn of reads: started alone, the request waited for
    the whole turn (counted as a round trip in every prediction: admission then refused what
    it could serve) and ran as a batch of one. It is queued instead, to be batched with the
    turn's other reads; once the loop is idle again, a lone request runs inside its read. The
    real engine on uvloop; its worker holds no model, so each run fails at once (answered)."""

    async def scenario() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        clock, s, engine, relay = await on_the_loop()
        reader, writer = socket.socketpair()
        in_the_turn: asyncio.Future[tuple[bool, bool]] = loop.create_future()

        def replied(worker: int, header: Reply, tensors: Tensors) -> None:
            writer.send(b"x")  # arrived during the run: read after it
            loop.add_reader(reader, read_after_the_run)
            relay.on_reply(worker, header, tensors)

        def read_after_the_run() -> None:
            loop.remove_reader(reader)
            reader.recv(1)
            time.sleep(ms(3))  # answering the batch took longer than half a 5 ms run
            fresh = request(clock, "read after the run", ms(500))
            in_the_turn.set_result((engine.idle(), not relay.run_alone(fresh)))

        engine.on_message = replied
        batch = [request(clock, f"batch {i}", ms(500)) for i in range(2)]
        try:
            answers = [awaited(r) for r in batch]
            for r in batch:
                s.submit(r)
            relay.kick()  # this turn of reads is over: its batch runs
            idle_then, queued = await in_the_turn
            engine.on_message = relay.on_reply
            await asyncio.sleep(0.02)  # the follow-up came, nothing more to run: idle
            alone = request(clock, "after a pause", ms(500))
            lone = awaited(alone)
            ran_inside_its_read = relay.run_alone(alone) and lone.done()
        finally:
            reader.close()
            writer.close()
            await engine.stop()
        for future in [*answers, lone]:
            if future.done():
                future.exception()  # the run's failure: its worker holds no model `m`
        return idle_then, queued, ran_inside_its_read

    idle_then, queued, ran_inside_its_read = uvloop.run(scenario())
    assert not idle_then  # the run's follow-up was still due
    assert queued
    assert ran_inside_its_read
