"""What `headway plan` reports beside its plan, into the plan file's `report`: the simulated
latency distribution of the plan against its SLO, and InferLine's coarse-grained baselines
(CG-Mean and CG-Peak, `baselines`) estimated on the same trace, so a plan's saving is seen
beside what the simple deployments would cost and do. `headway plan --report PLAN` and the
dashboard show it; neither simulates anything again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from headway.planning.baselines import CoarseGrained, peak_rate
from headway.planning.pipeline import Configuration
from headway.planning.planner import Planner
from headway.planning.simulator import Estimate

#: The quantiles (in %) of the simulated latencies the report keeps: enough to draw the
#: distribution's curve, its tail above all.
QUANTILES = (0.0, 1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 100.0)


def describe(config: Configuration) -> dict[str, str]:
    """Each stage's configuration in a word: `kind b<batch> x<replicas>`."""
    return {s: f"{c.hardware} b{c.max_batch} x{c.replicas}" for s, c in config.stages.items()}


def estimate_report(planner: Planner, config: Configuration) -> dict[str, Any]:
    """`config` replayed on the planner's whole trace: its cost, p99, the share of queries
    within the SLO, and the latency quantiles as [quantile %, ms] pairs."""
    estimate = planner.simulate(config)
    return _summary(planner, config, estimate)


def _summary(planner: Planner, config: Configuration, estimate: Estimate) -> dict[str, Any]:
    if not estimate.complete or not estimate.latencies.size:
        return {"cost_per_hour": round(config.cost(planner.catalogue), 4), "infeasible":
                "its estimate stopped early: too many queries were late"}  # fmt: skip
    values = np.percentile(estimate.latencies, QUANTILES) * 1e3
    return {
        "cost_per_hour": round(config.cost(planner.catalogue), 4),
        "p99_ms": round(estimate.p99 * 1e3, 3),
        "attainment": round(estimate.attainment(planner.slo), 5),
        "latency_ms": [[q, round(float(ms), 3)] for q, ms in zip(QUANTILES, values, strict=True)],
    }


def baselines(planner: Planner) -> dict[str, dict[str, Any]]:
    """CG-Mean and CG-Peak for the planner's pipeline and trace: the whole pipeline as one
    unit on InferLine's choice of kind ("fastest"), replicated for the trace's mean rate and
    for its peak over an SLO-long window; each with its configuration and its estimate on the
    trace. A kind a model has no profile on runs it on the cheapest kind without a GPU."""
    kinds = sorted(planner.catalogue, key=lambda k: planner.catalogue[k].cost_per_hour)
    fallback = next((k for k in kinds if planner.catalogue[k].gpu is None), kinds[0])
    sizes = sorted(
        {size for s in planner.pipeline.stages
         for profile in planner.profiles.get(s.model, {}).values() for size in profile.seconds}
    )  # fmt: skip
    units = CoarseGrained(planner.pipeline, planner.profiles, planner.catalogue, sizes, fallback)
    rates = {
        "cg_mean": planner.rate,
        "cg_peak": peak_rate(planner.arrivals, planner.slo) if len(planner.arrivals) else 0.0,
    }
    out: dict[str, dict[str, Any]] = {}
    for name, rate in rates.items():
        config = units.deployment(planner.slo, rate) if sizes else None
        if config is None:
            out[name] = {"rate_qps": round(rate, 3),
                         "infeasible": "no kind runs the whole pipeline within the SLO"}  # fmt: skip
            continue
        out[name] = {"rate_qps": round(rate, 3), "config": describe(config),
                     **estimate_report(planner, config)}  # fmt: skip
    return out


def report(planner: Planner, config: Configuration) -> dict[str, Any]:
    """The plan file's `report`: the plan's estimate (`estimate_report`) and the baselines."""
    found = planner.whole(config)  # the plan's, already replayed to confirm it
    mine = (
        _summary(planner, config, found)
        if found.complete and found.latencies.size == len(planner.arrivals)
        else estimate_report(planner, config)
    )
    return {
        "attainment": mine.get("attainment"),
        "latency_ms": mine.get("latency_ms", []),
        "baselines": baselines(planner),
    }
