"""`headway serve --plan` applies each field of a plan, or says why not (`planning.applying`)."""

from __future__ import annotations

from pathlib import Path

from headway.flows.plan import PlannedSize
from headway.planning.applying import serve_plan
from headway.planning.description import DEFAULT_CATALOGUE
from headway.planning.pipeline import Catalogue, Hardware
from headway.planning.plan_file import PlanFile, PlannedStage, parse_plan
from headway.repository import Repository


def repository(tmp_path: Path, *models: tuple[str, str]) -> Repository:
    for name, framework in models:
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "model.yaml").write_text(f"framework: {framework}\n")
    return Repository.scan(tmp_path)


def stage(
    name: str, model: str, hardware: str, *, batch: int = 4, replicas: int = 1,
    threads: int | None = None, gpu: str | None = None,
) -> PlannedStage:  # fmt: skip
    return PlannedStage(name, model, hardware, batch, replicas, 1.0, 100.0, 0.5, threads, gpu)


def plan(*stages: PlannedStage) -> PlanFile:
    return PlanFile("app", 30.0, 100.0, {}, stages)


def test_a_stage_on_a_cpu_kind_gets_its_threads_batch_and_replicas(tmp_path: Path) -> None:
    repo = repository(tmp_path, ("m", "sklearn"))
    in_force = serve_plan(
        plan(stage("s", "m", "cpu4", batch=8, replicas=3, threads=4)), repo, DEFAULT_CATALOGUE,
        gpus=0,
    )  # fmt: skip
    config = repo.get("m")
    assert (config.options["threads"], config.max_batch_size, config.replicas) == (4, 8, 3)
    assert in_force.workers == 3
    (described,) = in_force.describe()["stages"]
    assert described["threads"] == 4 and described["device"] == "cpu"
    assert described["not_applied"] == {}
    assert described["applied"] == ["hardware", "device", "max_batch_size", "replicas"]


def test_a_kind_the_plan_file_does_not_describe_is_read_from_the_catalogue(tmp_path: Path) -> None:
    repo = repository(tmp_path, ("m", "sklearn"), ("n", "sklearn"))
    serve_plan(plan(stage("s", "m", "cpu2")), repo, DEFAULT_CATALOGUE, gpus=0)
    assert repo.get("m").options["threads"] == 2
    in_force = serve_plan(plan(stage("s", "n", "big")), repo, DEFAULT_CATALOGUE, gpus=0)
    assert "threads" not in repo.get("n").options
    (described,) = in_force.describe()["stages"]
    assert "hardware 'big'" in described["not_applied"]["hardware"]
    assert described["applied"] == ["max_batch_size", "replicas"]


def test_a_gpu_kind_without_a_gpu_runs_on_the_cpu_and_says_why(tmp_path: Path) -> None:
    repo = repository(tmp_path, ("t", "torch"))
    planned = plan(stage("s", "t", "gpu1", threads=2, gpu="v100"))
    in_force = serve_plan(planned, repo, DEFAULT_CATALOGUE, gpus=0)
    assert "device" not in repo.get("t").options and repo.get("t").options["threads"] == 2
    (described,) = in_force.describe()["stages"]
    assert described["device"] == "cpu"
    assert "plans a GPU (v100) and this machine has none" in described["not_applied"]["device"]
    assert in_force.problems() == [
        f"stage 's': device not applied: {described['not_applied']['device']}"
    ]


def test_a_gpu_kind_with_a_gpu_puts_a_torch_model_on_it_but_not_a_sklearn_one(
    tmp_path: Path,
) -> None:
    repo = repository(tmp_path, ("t", "torch"), ("k", "sklearn"))
    catalogue = Catalogue({"gpu1": Hardware("gpu1", 1.0, gpu="a100")})
    in_force = serve_plan(
        plan(stage("a", "t", "gpu1"), stage("b", "k", "gpu1")), repo, catalogue, gpus=1
    )
    assert repo.get("t").options["device"] == "cuda" and repo.get("t").resources.gpus == 1
    assert "device" not in repo.get("k").options
    torch, sklearn = in_force.describe()["stages"]
    assert torch["device"] == "cuda" and torch["not_applied"] == {}
    assert "sklearn model, which runs on the CPU only" in sklearn["not_applied"]["device"]


def test_stages_of_one_model_add_their_replicas(tmp_path: Path) -> None:
    repo = repository(tmp_path, ("m", "sklearn"))
    planned = plan(
        stage("a", "m", "cpu1", batch=2, replicas=1, threads=1),
        stage("b", "m", "cpu2", batch=8, replicas=2, threads=2),
    )
    assert serve_plan(planned, repo, DEFAULT_CATALOGUE, gpus=0).workers == 3
    config = repo.get("m")
    assert (config.replicas, config.max_batch_size, config.options["threads"]) == (3, 8, 2)


def test_a_model_less_flow_stage_is_sized_by_its_app(tmp_path: Path) -> None:
    repo = repository(tmp_path, ("m", "sklearn"))
    planned = plan(
        stage("w", "(flow f stage join)", "cpu2", batch=8, replicas=2),
        stage("g", "(flow f stage other)", "gpu", threads=1, gpu="a100"),
    )
    in_force = serve_plan(planned, repo, DEFAULT_CATALOGUE, gpus=1)
    assert in_force.flow_stages() == {
        "(flow f stage join)": PlannedSize(2, 8, 2),
        "(flow f stage other)": PlannedSize(1, 4, 1),
    }
    assert in_force.workers == 3  # a worker per replica of each
    joined, other = in_force.describe()["stages"]
    assert joined["flow_stage"] and joined["not_applied"] == {}
    assert other["not_applied"] == {"device": "a flow's model-less stage runs on the CPU only"}


def test_a_plan_file_carries_each_stage_s_threads_and_gpu() -> None:
    document = {
        "app": "a", "slo_ms": 30, "rate_qps": 10, "feasible": True,
        "stages": {"s": {"model": "m", "hardware": "g", "threads": 3, "gpu": "a100",
                         "max_batch_size": 1, "replicas": 1, "throughput_qps": 1,
                         "utilisation": 0.1}},
    }  # fmt: skip
    (planned,) = parse_plan(document).stages
    assert (planned.threads, planned.gpu) == (3, "a100")
