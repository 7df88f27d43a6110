"""The pump and the reply path: the scheduler's decisions sent to the workers, their replies
turned into answers.

Between the controller's admission (above) and the engine (below): a poll of the scheduler
becomes actions sent through the engine, and each reply completes its action in the scheduler
and resolves its requests' futures with their rows of the batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from headway.clock import Timer, TimerClock
from headway.control.actions import INFER, LOAD, STEP, Dispatch, StepPlan
from headway.control.dispatch.messages import message
from headway.control.engine import Engine, Reply, Tensors
from headway.control.jobs import Job
from headway.control.model_stats import ModelStats
from headway.control.models.lifecycle import ModelLifecycle
from headway.control.models.states import ModelState
from headway.control.request import Prediction, Receiver, gather
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import HeadwayError, ModelError, ModelStopped

log = logging.getLogger("headway.controller")

#: Inline on the loop: the longest predicted run of a full batch that runs inside the read
#: that filled it (`Relay.run_full_batch`).
MID_TURN_RUN_LIMIT_S = 0.002


class ReplyWatch(Protocol):
    """Who waits for the workers' replies on the transport's side (`Relay.reply_watch`)."""

    def expect_reply(self, seconds: float, requests: int) -> None:
        """An INFER carrying `requests` requests went to a worker, which is predicted to run
        it in `seconds` (the run alone, without the round trip)."""

    def replies_in(self) -> None:
        """A reply came, and no worker is busy any more."""


class Relay:
    """Sends what `scheduler` decides through `engine` and answers from the replies, for the
    models of the lifecycle it serves (`serve`)."""

    def __init__(self, scheduler: Scheduler, engine: Engine, clock: TimerClock) -> None:
        self.scheduler = scheduler
        self.engine = engine
        self.clock = clock
        #: The served lifecycle's statistics and model states, by model key (`serve`).
        self.stats: dict[str, ModelStats] = {}
        self._states: dict[str, ModelState] = {}
        self._loaded: Callable[[int, str, Reply], None] = lambda worker, key, reply: None
        #: The loop the pump runs on; set when the controller starts.
        self.loop: asyncio.AbstractEventLoop | None = None
        #: Whether requests may carry traces; off: not looked at.
        self.tracing = False
        self._pump_scheduled = False
        self._timer: Timer | None = None
        self._timer_at = float("inf")
        #: Told of each INFER sent and of the reply that leaves no worker busy (the HTTP
        #: server polls for a reply due soon instead of sleeping); None: nobody.
        self.reply_watch: ReplyWatch | None = None
        #: The engine runs actions in this process, beside the loop (`--engine inline`'s
        #: thread): a short batch may run inside the pump (`Engine.run_now`).
        self._runs_beside_loop = engine.runs_inline and not engine.holds_loop

    def serve(self, lifecycle: ModelLifecycle) -> None:
        """Send and answer for `lifecycle`'s models; it hears the replies to LOADs."""
        self.stats = lifecycle.stats
        self._states = lifecycle.states
        self._loaded = lifecycle.loaded

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    # -- the pump: scheduler decisions -> engine -----------------------------------------------
    def kick(self) -> None:
        """Poll the scheduler soon (once per loop turn, however often asked)."""
        if not self._pump_scheduled and self.loop is not None:
            self._pump_scheduled = True
            self.loop.call_soon(self._pump)

    def run_full_batch(self, key: str) -> None:
        """A request of `key` was queued: inline on the loop, run a full batch of it now.

        A batch runs on the loop after each turn of reads; under overload a turn reads
        several batches' worth, and every batch past the first would wait a turn of its own
        (admission, counting those turns, refuses what comes behind them, unread). A full
        batch runs here instead, inside the read that filled it, and the turn reads on: the
        loop serves what it reads, whatever batches a turn fills. Not inside a run's answers
        (`Engine.between_runs`), nor while a batch would still be filling, nor when a full
        batch runs longer than MID_TURN_RUN_LIMIT_S: a model whose batches take milliseconds
        is what the loop spends its time on, and the rest of the turn's reads are better read
        first, to refuse what cannot make it and batch the freshest."""
        # asked of every request queued: the queue's rows first, compiled and mostly False
        if (
            self.scheduler.full_batch_queued(key, within=MID_TURN_RUN_LIMIT_S)
            and self.engine.between_runs()
        ):
            self._decide()  # a pump already due for the turn's end stays due

    def _pump(self) -> None:
        self._pump_scheduled = False
        self._decide()

    def _decide(self) -> None:
        """Poll the scheduler and carry out its decisions."""
        decisions = self.scheduler.poll()
        for request, error in decisions.rejected:
            self.fail(request, error)
        for dispatch in decisions.dispatches:
            self._send(dispatch)
        if decisions.dispatches:
            # inline: the batch chosen now runs now, before the loop reads again
            self.engine.run_sent()
        if decisions.wakeup is not None:
            self._wake_at(decisions.wakeup)

    def _wake_at(self, when: float) -> None:
        if self._timer is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.clock.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        self._pump()

    def _send(self, dispatch: Dispatch) -> None:
        config = None
        if dispatch.kind == LOAD:
            config = self._states[dispatch.model].config.to_wire()
            for key in dispatch.evict:
                evicted = self._states.get(key)
                if evicted is not None:
                    evicted.workers.discard(dispatch.worker)
        try:
            action, tensors = message(dispatch, config)
        except (KeyError, ValueError) as exc:
            # Requests that cannot form one batch (a model with no declared inputs, sent
            # tensors of other names or shapes): answered as the batch's failure, through the
            # reply path, so that none is left unanswered and the worker is free again.
            error = (
                f"its batch could not be formed ({type(exc).__name__}: {exc}): requests with "
                "other input names or shapes were batched together; declare the model's "
                "inputs in model.yaml so that each request is checked on arrival"
            )
            self.on_reply(dispatch.worker, {"id": dispatch.id, "ok": False, "error": error}, {})
            return
        if dispatch.kind == INFER and self._runs_beside_loop:
            # an in-process worker beside the loop: a short batch that finds it idle runs
            # here, done before the loop reads again (the hop to its thread costs more)
            answer = self.engine.run_now(
                dispatch.worker, action, tensors, seconds=dispatch.expected
            )
            if answer is not None:
                self.on_reply(dispatch.worker, *answer)
                return
        # A failed send means the worker is gone: the watcher reports it and requeues.
        self.engine.send(dispatch.worker, action, tensors)
        if self.reply_watch is not None and dispatch.kind == INFER:
            run = self.scheduler.estimator.estimate(dispatch.model, dispatch.rows)
            if run is not None:
                self.reply_watch.expect_reply(run, len(dispatch.requests))

    def run_alone(self, job: Job) -> bool:
        """Run `job` now, inside this call, when the engine runs actions in this process and
        the scheduler lets it start alone (`Scheduler.start_now`); False: queue it. Not while
        the engine is busy: inline, right after a run on the loop, the reads of what came
        during it find the model's queue empty and its worker idle to the scheduler, but one
        started alone then would wait for that turn of reads (counted as a round trip in every
        prediction) and run as a batch of one; queued, it is batched with them."""
        if not self.engine.idle():
            return False
        dispatch = self.scheduler.start_now(job)
        if dispatch is None:
            return False
        action, tensors = message(dispatch)
        answer = self.engine.run_now(dispatch.worker, action, tensors, seconds=dispatch.expected)
        if answer is None:  # busy after all, or too long to run here: sent as usual
            self.engine.send(dispatch.worker, action, tensors)
        else:
            self.on_reply(dispatch.worker, *answer)
        return True

    def catch_up(self) -> None:
        """Hear the workers' waiting replies now, and send what they free up (see
        `Controller.catch_up`). Inline nothing is: a batch chosen now would run only once the
        turn of reads ends, later than chosen for and without the rows read meanwhile."""
        if self.engine.holds_loop:
            return
        self.engine.catch_up()
        if self._pump_scheduled:
            self._pump()

    # -- the reply path: engine -> answers ----------------------------------------------------
    def on_reply(self, worker: int, reply: Reply, tensors: Tensors) -> None:
        ok = reply["ok"]
        dispatch_id = reply["id"]
        if dispatch_id is None:  # not an answer to an action of ours
            return
        if reply.get("late"):
            self.scheduler.refused(dispatch_id)
            self.kick()
            return
        if reply.get("part"):
            self._part(dispatch_id, tensors)
            return
        dispatch = self.scheduler.complete(
            dispatch_id, reply.get("duration") if ok else None, reply.get("first")
        )
        if dispatch is None:
            return
        if dispatch.kind == INFER:
            if ok:
                # counted when run, not when sent: a batch the worker refused (too late to
                # start) is requeued and would otherwise count twice
                received = self.clock.now()
                ran = float(reply.get("duration") or 0.0)
                if self.tracing:  # before the answers: answering ends a request's trace
                    for r in dispatch.requests:
                        if r.trace is not None:
                            r.trace.executed(
                                r.arrival, dispatch.sent_at, received, ran, dispatch.rows, worker
                            )
                self._answer(dispatch, tensors)
                self._executed(dispatch, ran, received)
            else:
                error = failure(dispatch.model, reply)
                for request in dispatch.requests:
                    self.fail(request, error)
        elif dispatch.kind == STEP:
            self._stepped(worker, dispatch, reply, tensors)
        elif dispatch.kind == LOAD:
            self._loaded(worker, dispatch.model, reply)
        if self.reply_watch is not None and not self.scheduler.placement.busy_workers():
            self.reply_watch.replies_in()
        self.kick()

    def _executed(self, dispatch: Dispatch, ran: float, received: float) -> None:
        """Count a batch that ran: its clients' rows and waits as traffic, the rows of
        measuring runs in it (warm-up, sweep, probe: no client's) apart, so that a model that
        served nobody shows no traffic."""
        sent = dispatch.sent_at
        waits: list[float] = []
        rows = 0
        for job in dispatch.requests:
            if not job.measuring:
                waits.append(sent - job.arrival)
                rows += job.rows
        stats = self.stats[dispatch.model]
        if rows < dispatch.rows:
            stats.measuring.ran(dispatch.rows - rows, 0.0 if waits else ran)
        if waits:
            stats.executed(
                rows,
                waits,
                infer_s=ran,
                input_s=max(0.0, received - sent - ran),
                output_s=self.clock.now() - received,
                at=received,
            )

    def _part(self, dispatch_id: int, tensors: Tensors) -> None:
        """One part of a streamed INFER's answer: each request's rows of it to its receiver
        at once, or kept to gather for a request that takes its answer whole."""
        dispatch = self.scheduler.placement.inflight.get(dispatch_id)
        if dispatch is None:  # its worker died meanwhile: its requests were failed or retried
            return
        now = self.clock.now()
        first = dispatch.first_part_at is None
        if first:
            dispatch.first_part_at = now
        stats = self.stats.get(dispatch.model)
        firsts: list[float] = []
        gaps: list[float] = []
        start = 0
        for index, job in enumerate(dispatch.requests):
            end = start + job.rows
            receiver = job.receiver
            if receiver is not None:
                mine = {k: v[start:end] for k, v in tensors.items()}
                if job.outputs is not None:
                    mine = {k: v for k, v in mine.items() if k in job.outputs}
                if job.counted:
                    if first:
                        firsts.append(now - job.arrival)
                    else:
                        gaps.append(now - dispatch.last_part_at)
                if job.stream:
                    job.made += 1
                    try:
                        receiver.part(mine)
                    except Exception:
                        log.exception("answering a request failed")
                else:
                    if dispatch.gathered is None:
                        dispatch.gathered = {}
                    dispatch.gathered.setdefault(index, []).append(mine)
            start = end
        dispatch.last_part_at = now
        if stats is not None:
            stats.delivered(firsts, gaps, now)

    def _stepped(self, worker: int, dispatch: Dispatch, reply: Reply, tensors: Tensors) -> None:
        """A generative model's step ended: the next one is sent, then each running sequence's
        part goes to its receiver (one reply carries the parts of every sequence in the step),
        `done` for those it ended, `fail` for those it failed (all of them when the step itself
        failed, naming why). A worker beside the loop runs the next step meanwhile; one on the
        loop (inline) runs it after this turn, as every action there."""
        ok = reply["ok"]
        outcome = self.scheduler.stepped(dispatch, reply if ok else None)
        if not self.engine.holds_loop:
            # the next step first: the worker runs it while this one's parts go out
            self._decide()
        plan = dispatch.payload
        assert isinstance(plan, StepPlan)
        name, _, version = dispatch.model.rpartition("@")
        number = int(version)
        now = self.clock.now()
        stats = self.stats.get(dispatch.model)
        ran = float(reply.get("duration") or 0.0)
        if self.tracing:
            for sequence, _, _, _ in outcome.parts:
                if sequence.trace is not None:
                    sequence.trace.span(
                        "step", dispatch.sent_at, now, **{"step.sequences": plan.sequences,
                        "step.part": sequence.made, "worker.id": worker, "worker.run_s": ran}
                    )  # fmt: skip
        firsts: list[float] = []
        gaps: list[float] = []
        late = 0
        for sequence, row, first, since in outcome.parts:
            receiver = sequence.receiver
            if receiver is None:
                continue  # withdrawn: it is stopped with the next step
            mine = {k: v[row : row + 1] for k, v in tensors.items()}
            wanted = sequence.outputs
            if wanted is not None:
                mine = {k: v for k, v in mine.items() if k in wanted}
            if sequence.counted:
                (firsts if first else gaps).append(since)
                late += first and now > sequence.deadline
            if sequence.stream:
                try:
                    receiver.part(mine)
                except Exception:
                    log.exception("answering a request failed")
            else:
                if sequence.gathered is None:
                    sequence.gathered = []
                sequence.gathered.append(mine)
        latencies: list[float] = []
        for sequence in outcome.ended:
            receiver = sequence.receiver
            if receiver is None:
                continue
            sequence.receiver = None
            try:
                outputs = {} if sequence.stream else gather(sequence.gathered or [])
            except ValueError as exc:
                self._failed(sequence, receiver, ModelError(f"model {name!r}: {exc}"))
                continue
            if sequence.counted:
                latencies.append(now - sequence.arrival)
            try:
                receiver.done(Prediction(name, number, outputs))
            except Exception:
                log.exception("answering a request failed")
        cause = reply.get("error") if not ok else None
        for sequence, error in outcome.failed:
            self.fail(sequence, ModelError(f"model {name!r} failed: {error or cause}"))
        if stats is not None:
            stats.delivered(firsts, gaps, now)
            stats.late += late
            if latencies:
                stats.answered(latencies)
                stats.streams += len(latencies)
            if ok and plan.run:
                if all(s.measuring for s in plan.run):  # a warm-up's: no client's traffic
                    stats.measuring.ran(plan.sequences, ran)
                else:
                    stats.executed(
                        plan.sequences,
                        [dispatch.sent_at - s.arrival for s in dispatch.requests if s.counted],
                        infer_s=ran,
                        input_s=max(0.0, now - dispatch.sent_at - ran),
                        output_s=self.clock.now() - now,
                        at=now,
                    )

    def _answer(self, dispatch: Dispatch, tensors: Tensors) -> None:
        name, _, version = dispatch.model.rpartition("@")
        now = self.clock.now()
        stats = self.stats[dispatch.model]
        if dispatch.first_part_at is not None:
            self._answer_stream(dispatch, name, int(version), now, stats)
            return
        late = sum(1 for r in dispatch.requests if now > r.deadline and r.measured)
        if late:
            stats.late += late
        latencies: list[float] = []  # of the clients' requests answered here (`counted`)
        number = int(version)
        alone = len(dispatch.requests) == 1
        # the usual batch's one output, sliced without a comprehension per request
        single = next(iter(tensors.items())) if len(tensors) == 1 else None
        start = 0
        for job in dispatch.requests:
            end = start + job.rows
            receiver = job.receiver
            if receiver is not None:
                job.receiver = None
                if alone:
                    mine = tensors
                elif single is not None:
                    mine = {single[0]: single[1][start:end]}
                else:
                    mine = {k: v[start:end] for k, v in tensors.items()}
                wanted = job.outputs
                if wanted is not None and (single is None or single[0] not in wanted):
                    mine = {k: v for k, v in mine.items() if k in wanted}
                if job.counted:
                    latencies.append(now - job.arrival)
                try:  # inline: once per request
                    receiver.done(Prediction(name, number, mine))
                except Exception:
                    log.exception("answering a request failed")
            start = end
        if latencies:
            stats.answered(latencies)

    def _answer_stream(
        self, dispatch: Dispatch, name: str, version: int, now: float, stats: ModelStats
    ) -> None:
        """A streamed INFER ended: each request's stream is done (its parts went to it), or,
        taken whole, answered with its parts gathered. Late: a first part after its deadline."""
        first = dispatch.first_part_at
        assert first is not None
        stats.late += sum(1 for r in dispatch.requests if first > r.deadline and r.measured)
        gathered = dispatch.gathered or {}
        latencies: list[float] = []
        for index, job in enumerate(dispatch.requests):
            receiver = job.receiver
            if receiver is None:
                continue
            job.receiver = None
            try:
                outputs = {} if job.stream else gather(gathered.get(index, []))
            except ValueError as exc:
                self._failed(job, receiver, ModelError(f"model {name!r}: {exc}"))
                continue
            if job.counted:
                latencies.append(now - job.arrival)
                stats.streams += 1
            try:
                receiver.done(Prediction(name, version, outputs))
            except Exception:
                log.exception("answering a request failed")
        if latencies:
            stats.answered(latencies)

    def fail(self, job: Job, error: HeadwayError) -> None:
        """Fail `job` with `error`, unless it has its answer already (or was withdrawn)."""
        receiver = job.receiver
        if receiver is not None:
            job.receiver = None
            self._failed(job, receiver, error)

    def _failed(self, job: Job, receiver: Receiver, error: HeadwayError) -> None:
        stats = self.stats.get(job.model) if job.counted else None
        if stats is not None:
            stats.failed(error.reason, self.clock.now() - job.arrival)
        try:
            receiver.fail(error)
        except Exception:
            log.exception("answering a request failed")


def failure(model: str, reply: Reply) -> ModelError:
    """The error of an INFER that failed: ModelStopped, with the CPU seconds its worker
    reported, for one the server stopped (a race's loser); else the model's own error."""
    message = f"model {model!r} failed: {reply.get('error')}"
    if reply.get("stopped"):
        return ModelStopped(message, cpu_s=float(reply.get("cpu_s", 0.0)))
    return ModelError(message)
