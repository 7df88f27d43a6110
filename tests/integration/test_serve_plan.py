"""`headway serve --plan` on a real server: a stage's hardware kind reaches its worker's
threads, and what cannot be applied (a GPU on a machine without one) is shown with the reason."""

from __future__ import annotations

from pathlib import Path

import httpx
import yaml

from headway.launcher import ServerProcess
from tests.runtime.workers import threads_model


def planned(model: str, hardware: str, threads: int, gpu: str | None = None) -> dict[str, object]:
    return {
        "model": model, "hardware": hardware, "threads": threads, "gpu": gpu,
        "max_batch_size": 4, "replicas": 1, "throughput_qps": 100.0, "utilisation": 0.1,
    }  # fmt: skip


def threads_of(url: str, model: str) -> int:
    body = {"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 1], "data": [0.0]}]}
    answer = httpx.post(f"{url}/v2/models/{model}/infer", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["outputs"][0]["data"][0])


def test_a_planned_kind_sets_its_workers_threads_and_a_missing_gpu_is_shown(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repository"
    threads_model(root, "threaded", None)
    threads_model(root, "accelerated", None)
    config = tmp_path / "headway.yaml"
    app = {"models": ["threaded", "accelerated"], "task": "regression"}
    config.write_text(yaml.safe_dump({"apps": {"pipe": app}}))
    plan = tmp_path / "plan.yaml"
    stages = {"main": planned("threaded", "cpu3", 3), "gpu": planned("accelerated", "g", 1, "a100")}
    document = {"app": "pipe", "feasible": True, "slo_ms": 1000, "rate_qps": 10, "stages": stages}
    plan.write_text(yaml.safe_dump(document, sort_keys=False))
    extra = ["--config", str(config), "--plan", str(plan)]
    with ServerProcess(root, state=tmp_path / "s.db", extra=extra, log=tmp_path / "log") as server:
        assert threads_of(server.url, "threaded") == 3
        assert threads_of(server.url, "accelerated") == 1
        described = httpx.get(f"{server.url}/apps/pipe", timeout=30).json()["plan"]
    assert described["workers"] == 2
    main, gpu = described["stages"]
    assert (main["stage"], main["threads"], main["device"], main["not_applied"]) == (
        "main",
        3,
        "cpu",
        {},
    )
    assert gpu["device"] == "cpu" and gpu["applied"] == ["hardware", "max_batch_size", "replicas"]
    assert "plans a GPU (a100) and this machine has none" in gpu["not_applied"]["device"]
