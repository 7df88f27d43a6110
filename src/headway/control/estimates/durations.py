"""How long actions will take, as the scheduler predicts them: INFER, LOAD and the round trip.

Every scheduling decision compares a prediction with a deadline; this is the one place those
predictions are made, from the measured INFER durations (`estimator`), the measured LOAD
durations (`loads`) and the recent RPC overhead (dispatch to answer, less the worker's time).
"""

from __future__ import annotations

from collections import deque

from headway.control.estimates.profiles import LatencyEstimator, percentile

#: The LOAD duration a worker's timeline assumes before any load was measured.
DEFAULT_LOAD_SECONDS = 0.25
#: A model never loaded is expected to load as fast as this percentile of the last RECENT_LOADS
#: loads of any model: robust to a few slow outliers (a load that also imported a framework,
#: or one a neighbour slowed), which as the maximum would make every cold start look
#: hopeless; and recent, so that after a stall that slowed many loads (a neighbour's burst, the
#: page cache reclaimed) it recovers within a hundred loads instead of waiting for each slowed
#: model to load again (bench/RESULTS-clockwork.md, "LOAD estimates").
UNSEEN_LOAD_QUANTILE = 90.0
RECENT_LOADS = 100
#: A model's LOAD estimate leaves out its slowest recent load (once it has three): on a shared
#: machine one load slowed by a neighbour is not what the next load will take. An estimate too
#: low costs a refusal (a late INFER is refused by its worker), never a late answer.
LOAD_OUTLIERS_IGNORED = 1
#: Until a model has loaded this many times (enough for its slowest load to be left out), its
#: LOAD estimate is never more pessimistic than a never-loaded model's: one or two loads cannot
#: tell a neighbour's stall from the model's cost.
TRUSTED_LOADS = 2 * LOAD_OUTLIERS_IGNORED + 1
#: Until a model is profiled (some batch size measured `min_samples` times), its INFER estimate
#: rests on its load's warm-up run alone, and the first runs after a load are slower than that
#: warm-up (caches still cold), by enough to answer late what the estimate admitted
#: (bench/RESULTS-clockwork.md, "The first runs after a load"). So the estimate of an
#: unprofiled model is stretched by this factor plus this many seconds; once profiled, its own
#: window is trusted.
UNPROFILED_FACTOR = 2.0
UNPROFILED_MARGIN = 0.002
#: A request refused on round trips measured longer ago than this is weighed again without
#: them (`forget_stale_round_trips`). The round trip is measured only by actions that run, and a
#: refused request never runs: after a burst of slow round trips (a neighbour's stall), a model
#: with a tight deadline that nothing else keeps measuring would be refused for ever.
ROUND_TRIP_MEMORY_S = 1.0


class RecentP90:
    """The 90th percentile (or the `q`-th) of the last `window` samples, recomputed every 8th
    sample (and while fewer than 8 are kept): a sort per sample would cost the hot path more
    than it tells. Each sample keeps the time it was taken (`at`), for `forget_before`."""

    def __init__(self, window: int, q: float = 90.0) -> None:
        self.q = q
        self._samples: deque[float] = deque(maxlen=window)
        self._times: deque[float] = deque(maxlen=window)
        self._seen = 0  # counted, not the window's length: a full window's never changes
        self.value = 0.0

    def add(self, sample: float, at: float = 0.0) -> float:
        """Record `sample` (negatives count as 0), taken at `at`; returns the percentile kept."""
        self._samples.append(max(0.0, sample))
        self._times.append(at)
        self._seen += 1
        if self._seen % 8 == 1 or len(self._samples) < 8:
            self.value = percentile(list(self._samples), self.q)
        return self.value

    def forget_before(self, cutoff: float) -> bool:
        """Leave out the samples taken before `cutoff` (0 when none is left); True when any was."""
        times, samples = self._times, self._samples
        if not times or times[0] >= cutoff:
            return False
        while times and times[0] < cutoff:
            times.popleft()
            samples.popleft()
        self.value = percentile(list(samples), self.q) if samples else 0.0
        return True


class Durations:
    """Predicted seconds for INFER (`service_time`), LOAD (`load_time`) and queued rows."""

    def __init__(
        self,
        estimator: LatencyEstimator | None = None,
        loads: LatencyEstimator | None = None,
        *,
        overhead_window: int = 64,
    ) -> None:
        self.estimator = estimator or LatencyEstimator()
        #: One sample is a LOAD estimate; the slowest recent ones are left out, and a model
        #: never loaded takes its estimate from recent loads of any model.
        self.loads = loads or LatencyEstimator(
            min_samples=1, trim=LOAD_OUTLIERS_IGNORED, pool=RECENT_LOADS
        )
        self._overheads = RecentP90(overhead_window)
        self.overhead = 0.0
        self._turns = RecentP90(overhead_window)
        #: Inline (`--engine inline`): the event loop's turn of reads before each batch runs
        #: while work waits (`observe_turn`); 0 for workers that run beside the loop.
        self.turn = 0.0
        self._last_runs: dict[int, tuple[float, bool]] = {}  # worker: (end, work waiting)

    def service_time(self, key: str, rows: int) -> float | None:
        """Predicted seconds from dispatch to answer for `rows` rows (RPC overhead included;
        stretched while the model is unprofiled, see UNPROFILED_FACTOR)."""
        found = self.estimator.lookup(key, rows)
        if found is None:
            return None
        estimate, profiled = found
        if not profiled:
            estimate = estimate * UNPROFILED_FACTOR + UNPROFILED_MARGIN
        return estimate + self.overhead

    def finish_time(self, key: str, rows: int, max_batch: int, replicas: int) -> float | None:
        """Predicted seconds until `rows` queued rows have run: one batch if they fit in one,
        else rounds of full batches over the model's replicas, each round but the last taking
        what such a batch usually takes (`LatencyEstimator.typical`) and the last its high
        percentile: a stall may hit any one of them, but not each (the sum of k runs' p99s is
        far above the p99 of their sum, and refused the requests that would have made it)."""
        if rows <= max_batch:
            return self.service_time(key, rows)
        full = self.service_time(key, max_batch)
        typical = self.estimator.typical(key, max_batch)
        if full is None or typical is None:
            return None
        if not self.estimator.profiled(key):
            typical = full - self.overhead
        batches = -(-rows // max_batch)
        rounds = -(-batches // max(1, replicas))
        return (rounds - 1) * (typical + self.overhead + self.turn) + full

    def load_time(self, key: str) -> float | None:
        """Predicted seconds to LOAD `key`: its own measurements (no more than a never-loaded
        model's estimate until it has TRUSTED_LOADS of them), else the UNSEEN_LOAD_QUANTILE of
        the last RECENT_LOADS loads of any model, else None (nothing measured yet: admission is optimistic,
        as for INFER)."""
        own = self.loads.estimate(key, 1)
        if own is not None and self.trusts_own_load(key):
            return own
        unseen = self.unseen_load_time()
        if own is None or unseen is None:
            return own if own is not None else unseen
        return min(own, unseen)

    def unseen_load_time(self) -> float | None:
        """The LOAD estimate of a model never loaded (see UNSEEN_LOAD_QUANTILE): while so few
        loads are pooled that the percentile would be the slowest (under ten for the 90th),
        the slowest LOAD_OUTLIERS_IGNORED are left out, as from a model's own loads."""
        return self.loads.recent(UNSEEN_LOAD_QUANTILE, leave_out=LOAD_OUTLIERS_IGNORED)

    def trusts_own_load(self, key: str) -> bool:
        """Whether `key`'s LOAD estimate is its own alone (else it depends on the unseen one)."""
        return self.loads.samples(key, 1) >= TRUSTED_LOADS

    def observe_load(self, key: str, seconds: float) -> bool:
        """Record a measured LOAD; True when the estimate for never-loaded models changed."""
        unseen = self.unseen_load_time()
        self.loads.observe(key, 1, seconds)
        return self.unseen_load_time() != unseen

    def observe_inline_run(
        self, worker: int, sent_at: float, start: float, end: float, *, waiting: bool
    ) -> float:
        """Record an INFER that ran on the event loop (inline) from `start` to `end`, sent at
        `sent_at`; `waiting`: work waited when it ended. Returns the turn (`turn`).

        Such a batch runs right after the turn of reads that follows the previous run. When
        work waited through that turn, the turn is what each round of batches ahead of a new
        request takes beyond its run, and there is no round trip: a batch sent before the
        previous one ended waited for it and for the turn, not for a hop to a worker. Else
        the round trip is counted from when it could start."""
        ended, waited = self._last_runs.get(worker, (float("-inf"), False))
        if waited:
            self.observe_turn(start - ended)
            self.observe_round_trip(0.0, start)
        else:
            self.observe_round_trip(start - max(sent_at, ended), start)
        self._last_runs[worker] = (end, waiting)
        return self.turn

    def observe_turn(self, seconds: float) -> None:
        """Record the seconds between two runs on the event loop while work waited (inline: a
        turn of reads, the loop's other work); the 90th percentile of recent ones is kept."""
        self.turn = self._turns.add(seconds)

    def observe_round_trip(self, overhead: float, now: float) -> None:
        """Record one action's RPC overhead, measured at `now`; the 90th percentile of recent
        ones is kept."""
        self.overhead = self._overheads.add(overhead, now)

    def forget_stale_round_trips(self, now: float) -> bool:
        """Leave out of `overhead` the round trips measured more than ROUND_TRIP_MEMORY_S before
        `now`; True when any was. Asked only when a request is about to be refused."""
        if not self._overheads.forget_before(now - ROUND_TRIP_MEMORY_S):
            return False
        self.overhead = self._overheads.value
        return True
