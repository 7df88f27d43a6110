"""The highest open-loop rate a server answers within its SLO: a search over short trials.

A closed loop's throughput overstates what a server sustains when requests arrive on their own
schedule: its batches are as large as its concurrency, while an open loop's are only as large
as the arrivals make them, and a request that waits behind a burst misses its deadline. So
capacity under an SLO is found the way it is planned, open loop: trials at fixed rates, each
passing when enough of its requests got a 200 within the SLO and the load generator sent on
schedule (a generator that is late measures itself, not the server).

The search starts at a given rate (`headway bench --find-rate` starts at a closed loop's
throughput), doubles while trials pass or halves while they fail until it has a passing rate
below a failing one, then bisects between them (geometrically) until they are within the
tolerance or the trials run out. It decides rates only; measuring is the caller's
(`headway.cli.bench`), so the search is tested without a server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Share of a trial's requests that must be answered 200 within the SLO for it to pass.
GOODPUT_SHARE = 0.9
#: The trial's send lateness allowed to the load generator itself, as a share of the SLO: past
#: it the generator, not the server, decided when requests went out.
ON_TIME_SHARE = 0.1
#: Most trials, the first one included.
MAX_TRIALS = 8
#: The search stops once the failing rate is within this factor of the passing one.
TOLERANCE = 0.05

PASSED, MISSED, GENERATOR_LATE = "passed", "missed the SLO", "load generator late"


@dataclass(frozen=True)
class Trial:
    """One open-loop run at ``rate`` requests a second and what decided its verdict.

    ``rate`` is the schedule's nominal rate, which the search steers by; ``offered`` the rate
    the run's window actually held (its requests over its duration), which a short Poisson
    run can miss by several percent, and which is what the server was shown to sustain."""

    rate: float
    attainment: float  # 200 answers within the SLO over the requests scheduled in the window
    own_lateness_p99_ms: float  # how late the generator got to its requests (99th percentile)
    verdict: str
    figures: dict[str, Any]

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED

    @property
    def offered(self) -> float:
        return float(self.figures["requests"]) / float(self.figures["duration_s"])


def judge(
    rate: float,
    figures: dict[str, Any],
    share: float = GOODPUT_SHARE,
    on_time_share: float = ON_TIME_SHARE,
) -> Trial:
    """The verdict on a run's figures (`headway.loadgen.report.summarize`, with an SLO): late
    sends make a trial invalid before its goodput is looked at."""
    slo_ms = figures["slo_ms"]
    if slo_ms is None:
        raise ValueError("a trial is judged against an SLO: summarize it with slo_ms")
    attainment = figures["slo_attainment"] or 0.0
    late = figures["own_send_lateness_ms"]["p99"] or 0.0
    if late > on_time_share * slo_ms:
        verdict = GENERATOR_LATE
    elif attainment >= share:
        verdict = PASSED
    else:
        verdict = MISSED
    return Trial(rate, attainment, late, verdict, figures)


class RateSearch:
    """Which rate to try next, from the trials so far; `next_rate` is None once done.

    ``sustained`` is the highest rate that passed below every failure, ``failed`` the lowest
    failure (None while there is none); ``limited_by`` says why the search ended: ``"server"`` (the two
    are within the tolerance, and the failure was the server's), ``"generator"`` (the lowest
    failure above the passing rate was the generator's, so the server may sustain more than
    this machine can offer), ``"trials"`` (out of trials first), or ``"floor"`` (nothing passed
    down to ``floor`` requests a second)."""

    def __init__(
        self,
        start: float,
        *,
        max_trials: int = MAX_TRIALS,
        tolerance: float = TOLERANCE,
        floor: float = 1.0,
    ) -> None:
        if not (start > 0 and math.isfinite(start)):
            raise ValueError(f"the first rate must be a finite number above 0, got {start}")
        if max_trials < 1:
            raise ValueError(f"a search needs at least one trial, got {max_trials}")
        if not tolerance > 0:
            raise ValueError(f"the tolerance must be above 0, got {tolerance}")
        self.start = start
        self.max_trials = max_trials
        self.tolerance = tolerance
        self.floor = floor
        self.trials: list[Trial] = []

    def record(self, trial: Trial) -> None:
        self.trials.append(trial)

    @property
    def failed(self) -> Trial | None:
        """The lowest-rate trial that failed."""
        failures = [t for t in self.trials if not t.passed]
        return min(failures, key=lambda t: t.rate) if failures else None

    @property
    def best(self) -> Trial | None:
        """The highest-rate trial that passed below every failure: a pass above a failure (the
        machine's noise) is not taken as sustained."""
        failed = self.failed
        passes = [t for t in self.trials if t.passed and (failed is None or t.rate < failed.rate)]
        return max(passes, key=lambda t: t.rate) if passes else None

    @property
    def sustained(self) -> float | None:
        """The rate of `best`."""
        best = self.best
        return best.rate if best is not None else None

    def next_rate(self) -> float | None:
        if not self.trials:
            return self.start
        if self.limited_by is not None:
            return None
        failed, sustained = self.failed, self.sustained
        if failed is None:  # every trial passed: look higher
            return 2.0 * max(t.rate for t in self.trials)
        if sustained is None:  # nothing passed below a failure: look lower
            return max(failed.rate / 2.0, self.floor)
        return math.sqrt(sustained * failed.rate)

    @property
    def limited_by(self) -> str | None:
        """Why the search is over, or None while it goes on."""
        failed, sustained = self.failed, self.sustained
        if sustained is None and failed is not None and failed.rate <= self.floor:
            return "floor"
        if (
            sustained is not None
            and failed is not None
            and failed.rate <= sustained * (1.0 + self.tolerance)
        ):
            return "generator" if failed.verdict == GENERATOR_LATE else "server"
        if len(self.trials) >= self.max_trials:
            if failed is not None and failed.verdict == GENERATOR_LATE:
                return "generator"
            return "trials"
        return None
