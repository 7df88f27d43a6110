"""The controller's refusals of a request before it is decoded, counted as refusals of its model.

The transport asks these with what it knows before decoding a request's tensors (its model,
how long it waited to be read, its timeout): `refuse_read` (HTTP) or `quick_refusal` (gRPC)
of every request, cheaply; `refuse_late` before admitting one that waited. The
decisions are `overload`'s and `admission`'s; this part looks up the model, asks them, and
counts what they refuse as `Controller.submit` would have.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from headway.clock import TimerClock
from headway.control.admission import admit_unread, behind
from headway.control.model_stats import ModelStats
from headway.control.models import READY, ModelState
from headway.control.overload import (
    BACKLOG,
    BRIEF_RUN_S,
    NO_BACKLOG,
    NOTICEABLE_WAIT_S,
    SHARE,
    SHED,
    Backlog,
    FrontendLag,
    quick_refusal,
)
from headway.control.request import DEFAULT_PRIORITY, priority_level
from headway.control.scheduler import Scheduler
from headway.errors import DeadlineUnmeetable, Shed
from headway.repository import ModelConfig

#: The state serving a model name (at a version), or None: `Controller.served`.
Served = Callable[[str, int | None], ModelState | None]


class UnreadRefusals:
    """Refusing requests unread (see the module docstring)."""

    def __init__(
        self,
        scheduler: Scheduler,
        clock: TimerClock,
        stats: Mapping[str, ModelStats],
        served: Served,
        *,
        inline: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.stats = stats
        self.served = served
        #: The frontend's read wait, watched for overload (`overload.FrontendLag`): the longer
        #: it stays behind, the harder it sheds. With the inline engine (`inline`) a model's
        #: run holds the loop, and a model whose runs are long is shed at the first share
        #: only (`overload.BRIEF_RUN_S`, `_refuse`).
        self.lag = FrontendLag()
        #: Inline, admission's whole check of the work ahead is asked unread too: nothing
        #: ahead runs while the loop reads, so a refusal decided after decoding costs the
        #: loop the decode for nothing, and the reads after a model's run outgrow it.
        self.inline = inline
        #: Refusals made by `_refuse` and not yet counted in the model's statistics and the
        #: scheduler's tally, by (model key, reason): counted in bulk by `count`, at the end of
        #: the loop turn they were made in or when the statistics are read, whichever is first.
        self._uncounted: Counter[tuple[str, str]] = Counter()

    def refuse_late(
        self, model: ModelState, *, timeout: float | None, waited: float, now: float
    ) -> None:
        """Raise DeadlineUnmeetable, counted as `submit` counts it, if a request for `model`
        (as `Controller.model()` found it) that `waited` seconds to be read, until `now` on the
        clock, cannot make its deadline even with one row (`admission.admit_unread`): the
        frontend asks before decoding its tensors. A model not ready, or with a prediction
        cache, is left to `submit`."""
        config = model.config
        if model.state != READY or config.cache:
            return
        timeout = timeout if timeout is not None else config.slo_ms / 1000.0
        try:
            admit_unread(
                config.key,
                now - waited + timeout,
                now=now,
                waited=waited,
                predictions=self.scheduler.predictions,
            )
        except DeadlineUnmeetable as exc:
            stats = self.stats[config.key]
            stats.requests += 1
            stats.errors[exc.reason] += 1
            raise

    def refuse_read(
        self,
        name: str,
        version: int | None,
        waited: float,
        timeout: float | None,
        priority: int | None,
    ) -> str | None:
        """`quick_refusal` for the HTTP transport, which asks it of every infer request it has
        read while the server may be behind (`api.refusals`): its wait observed by the lag,
        refused (counted in bulk, by `count`) only if the frontend is shedding, the request
        waited long enough to be late, or its model's queued work refused one since it last
        shrank, so that a request read at once is left to admission as before. One call, one
        look at the clock, the model and its backlog: under overload the frontend asks it of
        most of what it reads."""
        now = self.clock.now()
        shedding = self.lag.observe(waited, now)
        config = self._refusable(name, version, priority)
        if config is None:
            return None
        backlog = self.scheduler.backlogged(config.key)
        if not shedding and waited < NOTICEABLE_WAIT_S and backlog is NO_BACKLOG:
            return None
        return self._refuse(config, timeout, waited, now, backlog)

    def quick_refusal(
        self,
        name: str,
        version: int | None,
        *,
        timeout: float | None,
        priority: int | None,
        waited: float,
    ) -> str | None:
        """Why a request for `name` that `waited` s to be read is refused before it is decoded
        (`overload.LATE`, `BACKLOG` or `SHED`), counted as a refusal of its model; None: decode
        and submit it, counted at once. A model not registered or not ready, or with a prediction
        cache, and a request with a priority of its own, are left to `submit`."""
        now = self.clock.now()
        self.lag.observe(waited, now)
        config = self._refusable(name, version, priority)
        if config is None:
            return None
        reason = self._refuse(config, timeout, waited, now, self.scheduler.backlogged(config.key))
        self.count()
        return reason

    def _refusable(
        self, name: str, version: int | None, priority: int | None
    ) -> ModelConfig | None:
        """The config of the model a request for `name` is for, if a refusal before decoding
        may apply to it: ready, with no prediction cache, and the request at the default
        priority (else None: left to `submit`)."""
        model = self.served(name, version)
        if model is None or model.state != READY or model.config.cache:
            return None
        if priority is not None and priority_level(priority) != DEFAULT_PRIORITY:
            return None
        return model.config

    def _refuse(
        self,
        config: ModelConfig,
        timeout: float | None,
        waited: float,
        now: float,
        backlog: Backlog,
    ) -> str | None:
        """The refusal of a default-priority request for the model of `config`
        (`overload.quick_refusal`), with its `backlog` looked up already. O(1): a few lookups
        and comparisons."""
        key = config.key
        timeout = timeout if timeout is not None else config.slo_ms / 1000.0
        lag = self.lag
        deadline = now - waited + timeout
        share = lag.share
        if self.inline and share < SHARE and lag.shedding:
            full = self.scheduler.full_batch_run(key)
            if full is None or full > BRIEF_RUN_S:  # its waits are its runs'
                share = SHARE
        reason = quick_refusal(
            waited=waited,
            timeout=timeout,
            service=self.scheduler.predictions.service_time(key, 1),
            deadline=deadline,
            backlog=backlog,
            shedding=lag.shedding,
            share=share,
        )
        if reason is None and self.inline and self.behind(key, deadline, now):
            reason = BACKLOG
        if reason is not None:
            uncounted = self._uncounted
            if not uncounted:
                self.clock.call_at(now, self.count)
            uncounted[key, reason] += 1
        return reason

    def count(self) -> None:
        """Count the refusals `_refuse` made since the last count as `submit` counts a refusal:
        a request of its model and an error of its reason, and in the scheduler's tally. Under
        overload most requests are refused, and one count per turn of reads is cheaper than
        one per request; whoever reads the statistics asks first (`Controller.statistics`)."""
        uncounted = self._uncounted
        if not uncounted:
            return
        scheduler = self.scheduler
        for (key, reason), n in uncounted.items():
            stats = self.stats.get(key)
            if stats is not None:
                stats.requests += n
                stats.errors[Shed.reason if reason == SHED else DeadlineUnmeetable.reason] += n
            scheduler.count(key, "refused_unread", reason, n)
        uncounted.clear()

    def behind(self, key: str, deadline: float, now: float) -> bool:
        """Whether admission would refuse a one-row request of the default priority for `key`,
        due at `deadline`, for the work ahead of it (`admission.behind`): one row is the least
        a request not yet decoded can hold. A model not loaded or not profiled is left to
        admission."""
        scheduler = self.scheduler
        model = scheduler.placement.models.get(key)
        if model is None or not model.replicas or not scheduler.policy.early_reject:
            return False
        predictions = scheduler.predictions
        service = predictions.service_time(key, 1)
        if service is None:
            return False
        why = behind(
            model,
            rows=1,
            priority=DEFAULT_PRIORITY,
            deadline=deadline,
            now=now,
            service=service,
            predictions=predictions,
            busy=scheduler.placement.busy_wait(model, now),
        )
        return why is not None
