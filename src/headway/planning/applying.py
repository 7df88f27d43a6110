"""What `headway serve --plan` makes of a plan: each planned model served with its stages'
replicas, max batch size and hardware kind (its threads per worker; the GPU, where the kind
has one and so does this machine), and each field it could not apply, with the reason.
`GET /apps/{app}` shows both (`PlanInForce.describe`).

A model that several stages call gets their replicas together, the largest of their batch
sizes and threads, and a GPU if any of them planned one. A flow's model-less worker stage is
planned as no repository model (`flows.plan.stage_model`): its sizes go to the flow app,
which gives them to the stage's own model when it deploys (`flows.stage_models`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from headway.flows.plan import PlannedSize
from headway.planning.from_flow import is_stage_model
from headway.planning.pipeline import Catalogue
from headway.planning.plan_file import PlanFile, PlannedStage
from headway.repository import ModelConfig, Repository

#: The options that put a framework's model on the GPU (its adapter reads them); the other
#: frameworks run on the CPU only.
GPU_OPTIONS: Mapping[str, Mapping[str, Any]] = {
    "torch": {"device": "cuda"},
    "onnx": {"providers": ["CUDAExecutionProvider", "CPUExecutionProvider"]},
}
#: The fields of a planned stage, in the order they are shown.
FIELDS = ("hardware", "device", "max_batch_size", "replicas")


@dataclass(frozen=True)
class StageInForce:
    """One planned stage as served: the threads and device its model's workers run with (None
    and "cpu" when not applied), and each field not applied, with the reason."""

    stage: PlannedStage
    threads: int | None
    device: str
    not_applied: Mapping[str, str]
    #: A flow's model-less worker stage, sized by its app when it deploys.
    flow_stage: bool = False

    def describe(self) -> dict[str, Any]:
        s = self.stage
        return {
            "stage": s.name,
            "model": s.model,
            "hardware": s.hardware,
            "threads": self.threads,
            "device": self.device,
            "max_batch_size": s.max_batch_size,
            "replicas": s.replicas,
            "applied": [f for f in FIELDS if f not in self.not_applied],
            "not_applied": dict(self.not_applied),
            "flow_stage": self.flow_stage,
        }


@dataclass(frozen=True)
class PlanInForce:
    """A plan as the server applied it; `workers`: the worker processes it needs (one per
    planned replica)."""

    plan: PlanFile
    workers: int
    stages: tuple[StageInForce, ...]

    def flow_stages(self) -> dict[str, PlannedSize]:
        """The sizes of the flow's model-less worker stages, by the name each is planned as."""
        return {
            s.stage.model: PlannedSize(s.stage.replicas, s.stage.max_batch_size, s.threads)
            for s in self.stages
            if s.flow_stage
        }

    def describe(self) -> dict[str, Any]:
        return {
            "app": self.plan.app,
            "slo_ms": self.plan.slo_ms,
            "rate_qps": self.plan.rate_qps,
            "workers": self.workers,
            "stages": [s.describe() for s in self.stages],
        }

    def problems(self) -> list[str]:
        """Each field not applied, as a line naming its stage."""
        return [
            f"stage {s.stage.name!r}: {field} not applied: {why}"
            for s in self.stages
            for field, why in s.not_applied.items()
        ]


def serve_plan(
    plan: PlanFile, repository: Repository, catalogue: Catalogue, *, gpus: int
) -> PlanInForce:
    """Apply `plan` to `repository`'s models, in place (see the module docstring); `catalogue`
    describes a hardware kind the plan file does not (a file written before it did), `gpus`
    is how many this machine has."""
    served: dict[str, ModelConfig] = {}
    stages: list[StageInForce] = []
    workers = 0
    for stage in plan.stages:
        threads, gpu, not_applied = _hardware(stage, catalogue)
        if is_stage_model(stage.model):  # its app sizes it; its worker runs the flow's code
            if gpu is not None:
                not_applied["device"] = "a flow's model-less stage runs on the CPU only"
            stages.append(StageInForce(stage, threads, "cpu", not_applied, flow_stage=True))
            workers += stage.replicas
            continue
        config = served.get(stage.model) or repository.get(stage.model)  # ModelNotFound
        first = stage.model not in served
        options = dict(config.options)
        device = "cpu"
        if threads is not None:
            options["threads"] = max(threads, 1 if first else int(options.get("threads", 1)))
        if gpu is not None:
            reason = _no_gpu(stage, config, gpu, gpus)
            if reason is None:
                options.update(GPU_OPTIONS[config.framework])
                device = "cuda"
            else:
                not_applied["device"] = reason
        resources = config.resources
        if device == "cuda":
            resources = replace(resources, gpus=max(resources.gpus, 1.0))
        served[stage.model] = replace(
            config,
            replicas=stage.replicas + (0 if first else config.replicas),
            max_batch_size=max(stage.max_batch_size, 1 if first else config.max_batch_size),
            options=options,
            resources=resources,
        )
        stages.append(StageInForce(stage, threads, device, not_applied))
    repository.models.update(served)
    workers += sum(c.replicas for c in served.values())
    return PlanInForce(plan, workers, tuple(stages))


def _hardware(
    stage: PlannedStage, catalogue: Catalogue
) -> tuple[int | None, str | None, dict[str, str]]:
    """The stage's kind's threads and GPU, from the plan file, else the catalogue; a kind
    neither describes is not applied."""
    if stage.threads is not None:
        return stage.threads, stage.gpu, {}
    if stage.hardware in catalogue:
        kind = catalogue[stage.hardware]
        return kind.threads, kind.gpu, {}
    why = (
        f"the plan file does not describe hardware {stage.hardware!r} and the catalogue has "
        f"only {sorted(catalogue)}: write the plan again with `headway plan`, or declare the "
        "kind under hardware: in --config"
    )
    return None, None, {"hardware": why, "device": why}


def _no_gpu(stage: PlannedStage, config: ModelConfig, gpu: str, gpus: int) -> str | None:
    """Why the stage's model cannot run on the GPU its kind plans; None when it can."""
    if gpus < 1:
        return (
            f"hardware {stage.hardware!r} plans a GPU ({gpu}) and this machine has none: the "
            "stage runs on the CPU"
        )
    if config.framework not in GPU_OPTIONS:
        return (
            f"model {config.name!r} is a {config.framework} model, which runs on the CPU only "
            f"(a GPU serves {', '.join(sorted(GPU_OPTIONS))} models)"
        )
    return None
