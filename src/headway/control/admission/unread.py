"""The controller's refusals of a request before it is decoded, counted as refusals of its model.

The transports ask `screen` with what they know before decoding a request's tensors (its
model, how long it waited to be read, its timeout and priority): the HTTP server of each infer
request it reads while `may_refuse` says the server may be behind, the gRPC server of each
call, and the infer route of one that waited and was not screened on its way in. The decisions
are `overload`'s and `admission`'s; this part looks up the model, asks them, and counts what
they refuse as `Controller.submit` would have.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from headway.clock import TimerClock
from headway.control.actions import Tally
from headway.control.admission.admit import behind
from headway.control.admission.backlog import Backlog, Backlogs
from headway.control.admission.overload import (
    BRIEF_RUN_S,
    NOTICEABLE_WAIT_S,
    SHARE,
    FrontendLag,
    quick_refusal,
)
from headway.control.admission.reasons import BACKLOG, REFUSED_UNREAD, Refusal
from headway.control.estimates.durations import Durations
from headway.control.model_stats import ModelStats
from headway.control.placement.slots import Placement
from headway.control.request import DEFAULT_PRIORITY, InferenceRequest, priority_level
from headway.repository import ModelConfig

#: The config of the model serving a name (at a version) if it is ready, else None.
Ready = Callable[[str, int | None], ModelConfig | None]


class UnreadRefusals:
    """Refusing requests unread (see the module docstring). `ready` finds a request's model;
    what its queue and workers hold is read from `placement`, what admission refused from
    `backlogs`, and refusals are counted in `stats` and `tally`."""

    def __init__(
        self,
        clock: TimerClock,
        durations: Durations,
        placement: Placement,
        backlogs: Backlogs,
        tally: Tally,
        stats: Mapping[str, ModelStats],
        ready: Ready,
        *,
        early_reject: bool = True,
        inline: bool = False,
    ) -> None:
        self.clock = clock
        self.durations = durations
        self.placement = placement
        self.backlogs = backlogs
        self._tally = tally
        self.stats = stats
        self.ready = ready
        self.early_reject = early_reject
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
        self._uncounted: Counter[tuple[str, Refusal]] = Counter()

    def may_refuse(self, waited: float) -> bool:
        """Whether `screen` may refuse a request that waited `waited` s to be read: not while
        the frontend keeps up (its lag is calm, no model's queued work refused a request since
        it last shrank) and the wait is below the noticeable one. Then the HTTP server does not
        ask (nor need the lag observe the wait): one comparison per request while it keeps up."""
        return waited >= NOTICEABLE_WAIT_S or not self.lag.calm or self.backlogs.current

    def screen(self, request: InferenceRequest) -> Refusal | None:
        """Why `request`, not decoded yet, is refused now (`overload.LATE`, `BACKLOG` or
        `SHED`), counted as a refusal of its model (in bulk, by `count`); None: decode and
        submit it. Its wait to be read (from its `arrival` until now) is observed by the lag
        whatever the verdict. A model not registered or not ready, or with a prediction cache,
        and a request with a priority of its own, are left to `submit`. One look at the clock,
        the model and its backlog: under overload the frontend asks it of most of what it
        reads."""
        now = self.clock.now()
        arrival = request.arrival
        waited = 0.0 if arrival is None else now - arrival
        self.lag.observe(waited, now)
        config = self._refusable(request.model, request.version, request.priority)
        if config is None:
            return None
        return self._refuse(config, request.timeout, waited, now, self.backlogs.of(config.key))

    def _refusable(
        self, name: str, version: str | None, priority: int | None
    ) -> ModelConfig | None:
        """The config of the model a request for `name` is for, if a refusal before decoding
        may apply to it: ready, with no prediction cache, and the request at the default
        priority (else None: left to `submit`, as is a version that is not a number)."""
        number: int | None = None
        if version is not None:
            if not (version.isascii() and version.isdigit() and len(version) < 19):
                return None
            number = int(version)
        config = self.ready(name, number)
        if config is None or config.cache:
            return None
        if priority is not None and priority_level(priority) != DEFAULT_PRIORITY:
            return None
        return config

    def _refuse(
        self,
        config: ModelConfig,
        timeout: float | None,
        waited: float,
        now: float,
        backlog: Backlog,
    ) -> Refusal | None:
        """The refusal of a default-priority request for the model of `config`
        (`overload.quick_refusal`), with its `backlog` looked up already. O(1): a few lookups
        and comparisons."""
        key = config.key
        timeout = timeout if timeout is not None else config.slo_ms / 1000.0
        lag = self.lag
        deadline = now - waited + timeout
        share = lag.share
        if self.inline and share < SHARE and lag.shedding:
            model = self.placement.models.get(key)
            full = None if model is None else self.durations.service_time(key, model.max_batch)
            if full is None or full > BRIEF_RUN_S:  # its waits are its runs'
                share = SHARE
        reason = quick_refusal(
            waited=waited,
            timeout=timeout,
            service=self.durations.service_time(key, 1),
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
        count = self._tally.count
        for (key, reason), n in uncounted.items():
            stats = self.stats.get(key)
            if stats is not None:
                stats.requests += n
                stats.errors[reason.error.reason] += n
            count(key, REFUSED_UNREAD, reason.reason, n)
        uncounted.clear()

    def behind(self, key: str, deadline: float, now: float) -> bool:
        """Whether admission would refuse a one-row request of the default priority for `key`,
        due at `deadline`, for the work ahead of it (`admit.behind`): one row is the least
        a request not yet decoded can hold. A model not loaded or not profiled is left to
        admission."""
        placement = self.placement
        model = placement.models.get(key)
        if model is None or not model.replicas or not self.early_reject:
            return False
        durations = self.durations
        service = durations.service_time(key, 1)
        if service is None:
            return False
        why = behind(
            model,
            rows=1,
            priority=DEFAULT_PRIORITY,
            deadline=deadline,
            now=now,
            service=service,
            durations=durations,
            busy=placement.busy_wait(model, now),
        )
        return why is not None
