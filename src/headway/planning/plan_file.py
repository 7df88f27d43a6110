"""The plan file (`headway plan -o plan.yaml`): what to run, and what the tuner needs.

`headway serve --plan` reads its `stages` (`applying.serve_plan`: hardware, max_batch_size
and replicas per model, one worker process per replica); the tuner reads the rest. docs/planning.md shows the
file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headway.errors import ConfigError
from headway.planning.description import read_document
from headway.planning.pipeline import Catalogue, Configuration, Pipeline, StageConfig
from headway.planning.planner import Plan, Planner


@dataclass(frozen=True)
class PlannedStage:
    """One stage as planned: its model and configuration, and the tuner's figures."""

    name: str
    model: str
    hardware: str
    max_batch_size: int
    replicas: int
    scale: float
    throughput_qps: float
    utilisation: float
    #: The hardware kind's threads per worker and GPU, as the plan file states them (None:
    #: a file written before it carried them; the catalogue is asked instead).
    threads: int | None = None
    gpu: str | None = None


@dataclass(frozen=True)
class PlanFile:
    """A plan as written to (and read from) a plan file."""

    app: str
    slo_ms: float
    rate_qps: float
    envelope: Mapping[float, float]
    stages: tuple[PlannedStage, ...]

    def configuration(self) -> Configuration:
        return Configuration(
            {s.name: StageConfig(s.hardware, s.max_batch_size, s.replicas) for s in self.stages}
        )


def plan_document(
    app: str,
    plan: Plan,
    planner: Planner,
    envelope: Mapping[float, float],
    seconds: float,
) -> dict[str, Any]:
    """The plan file's content for a plan `planner` made (in `seconds`)."""
    document: dict[str, Any] = {
        "app": app,
        "slo_ms": round(planner.slo * 1e3, 3),
        "headroom": planner.headroom,
        "goal_ms": round(planner.goal * 1e3, 3),
        "feasible": plan.feasible,
        "rate_qps": round(planner.rate, 3),
        "frontend_ms": round(planner.frontend_seconds * 1e3, 3),
        "planning_seconds": round(seconds, 3),
        "estimates": plan.estimates,
        "trace_queries": len(planner.arrivals),
        "screened_queries": planner.screened_queries,
    }
    if not plan.feasible or plan.config is None:
        document["reason"] = plan.reason
        return document
    config = plan.config
    document.update(
        cost_per_hour=round(plan.cost_per_hour, 4),
        p99_ms=round(plan.p99 * 1e3, 3),
        envelope={round(k, 6): round(v, 3) for k, v in envelope.items()},
        stages={
            name: stage_document(planner.pipeline, planner.catalogue, planner, config, name)
            for name in planner.pipeline.names
        },
        steps=plan.steps,
    )
    return document


def stage_document(
    pipeline: Pipeline, catalogue: Catalogue, planner: Planner, config: Configuration, name: str
) -> dict[str, Any]:
    c = config[name]
    stage = pipeline[name]
    kind = catalogue[c.hardware]
    return {
        "model": stage.model,
        "hardware": c.hardware,
        "threads": kind.threads,
        "gpu": kind.gpu,
        "max_batch_size": c.max_batch,
        "replicas": c.replicas,
        "scale": stage.scale,
        "throughput_qps": round(planner.profile(name, c.hardware).throughput(c.max_batch), 3),
        "utilisation": round(planner.utilisation(config)[name], 4),
        "cost_per_hour": round(c.replicas * catalogue[c.hardware].cost_per_hour, 4),
    }


def write_plan(document: Mapping[str, Any], path: Path) -> None:
    Path(path).write_text(yaml.safe_dump(dict(document), sort_keys=False))


def read_plan(path: Path) -> PlanFile:
    """A plan file, checked; a ConfigError names the file and the key."""
    return parse_plan(read_document(path), str(path))


def parse_plan(document: Any, path: str = "the plan") -> PlanFile:
    """A plan file's content (`plan_document`'s), checked."""
    if not isinstance(document, Mapping):
        raise ConfigError(f"{path}: not a plan file (expected a mapping)")
    if not document.get("feasible", False):
        raise ConfigError(f"{path}: the plan is infeasible: {document.get('reason', '')}")
    try:
        stages = tuple(
            PlannedStage(
                str(name),
                str(raw["model"]),
                str(raw["hardware"]),
                int(raw["max_batch_size"]),
                int(raw["replicas"]),
                float(raw.get("scale", 1.0)),
                float(raw["throughput_qps"]),
                float(raw["utilisation"]),
                int(raw["threads"]) if raw.get("threads") is not None else None,
                str(raw["gpu"]) if raw.get("gpu") is not None else None,
            )
            for name, raw in document["stages"].items()
        )
        return PlanFile(
            str(document["app"]),
            float(document["slo_ms"]),
            float(document["rate_qps"]),
            {float(k): float(v) for k, v in (document.get("envelope") or {}).items()},
            stages,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{path}: not a valid plan file ({type(exc).__name__}: {exc})") from None
