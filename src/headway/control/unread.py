"""The controller's refusals of a request before it is decoded, counted as refusals of its model.

The transport asks these with what it knows before decoding a request's tensors (its model,
how long it waited to be read, its timeout): `may_refuse_unread` of every request, cheaply, and
`refuse` of the model it gives (`quick_refusal` asks both at once); `refuse_late` before
admitting one that waited. The
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
    MIN_SHARE,
    NO_BACKLOG,
    NOTICEABLE_WAIT_S,
    SHARE,
    SHED,
    FrontendLag,
    quick_refusal,
)
from headway.control.request import DEFAULT_PRIORITY, priority_level
from headway.control.scheduler import Scheduler
from headway.errors import DeadlineUnmeetable, Shed

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
        #: The frontend's read wait, watched for overload (`overload.FrontendLag`). With the
        #: inline engine (`inline`) a model's run holds the loop, and a wait as long as a run
        #: is that run's, not a backlog of reads: shedding does not grow harder there.
        self.lag = FrontendLag(min_share=SHARE if inline else MIN_SHARE)
        #: Inline, admission's whole check of the work ahead is asked unread too: nothing
        #: ahead runs while the loop reads, so a refusal decided after decoding costs the
        #: loop the decode for nothing, and the reads after a model's run outgrow it.
        self.inline = inline
        #: Refusals made by `refuse` and not yet counted in the model's statistics and the
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

    def may_refuse_unread(self, name: str, version: int | None, waited: float) -> ModelState | None:
        """The model a request for `name` that `waited` s to be read is for, if `refuse` might
        refuse it: the frontend is shedding, the request waited long enough to be late, or its
        model's queued work refused one since it last shrank; else None (as for a model not
        ready or with a prediction cache, left to `submit`). The frontend asks this of every
        request it may refuse (it watches the frontend's lag meanwhile), and reads a request's
        deadline only for a model this gives, so a server that keeps up pays a lookup or two."""
        shedding = self.lag.observe(waited, self.clock.now())
        model = self.served(name, version)
        if model is None or model.state != READY or model.config.cache:
            return None
        if (
            shedding
            or waited >= NOTICEABLE_WAIT_S
            or self.scheduler.backlogged(model.config.key) is not NO_BACKLOG
        ):
            return model
        return None

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
        cache, is left to `submit`."""
        self.lag.observe(waited, self.clock.now())
        model = self.served(name, version)
        if model is None or model.state != READY or model.config.cache:
            return None
        reason = self.refuse(model, timeout=timeout, priority=priority, waited=waited)
        self.count()
        return reason

    def refuse(
        self, model: ModelState, *, timeout: float | None, priority: int | None, waited: float
    ) -> str | None:
        """`quick_refusal` of a request for `model` (ready, no cache), once the lag has observed
        its wait (`may_refuse_unread`). O(1): a few lookups and comparisons, for the transport
        to ask of every request under overload; counted by `count`, in bulk. A request with a
        priority of its own is left to `submit`."""
        if priority is not None and priority_level(priority) != DEFAULT_PRIORITY:
            return None
        config = model.config
        key = config.key
        now = self.clock.now()
        timeout = timeout if timeout is not None else config.slo_ms / 1000.0
        scheduler = self.scheduler
        lag = self.lag
        reason = quick_refusal(
            waited=waited,
            timeout=timeout,
            service=scheduler.predictions.service_time(key, 1),
            deadline=now - waited + timeout,
            backlog=scheduler.backlogged(key),
            shedding=lag.shedding,
            share=lag.share,
        )
        if reason is None and self.inline and self.behind(key, now - waited + timeout, now):
            reason = BACKLOG
        if reason is not None:
            uncounted = self._uncounted
            if not uncounted:
                self.clock.call_at(now, self.count)
            uncounted[key, reason] += 1
        return reason

    def count(self) -> None:
        """Count the refusals `refuse` made since the last count as `submit` counts a refusal:
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
