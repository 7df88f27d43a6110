"""Several versions of one model served side by side, over an in-process fake engine.

The fake engine answers each action on the next turn of the event loop: a LOAD succeeds (or
fails for the versions told to), an INFER answers each row with the version number that the
model key names, so which version answered is visible in the output itself.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.api.metrics import render
from headway.apps import SelectionApplication, parse_app
from headway.control.controller import Controller
from headway.control.engine import Action, Tensors
from headway.control.models.states import READY, UNAVAILABLE
from headway.errors import ConfigError, InvalidInput, ModelNotFound, ModelNotReady
from headway.repository import Repository
from headway.testing import FakeEngine
from tests.control.helpers import infer

YAML = (
    "framework: python\nentrypoint: m.py:M\n"
    "inputs: [{name: input-0, datatype: FP32, shape: [-1, 4]}]\n"
)
ROW = {"input-0": np.ones((1, 4), np.float32)}


def version_rows(action: Action, tensors: Tensors) -> Tensors:
    """Each row answered with the version number its model key names."""
    version = int(action["model"].rpartition("@")[2])
    return {"output-0": np.full((action["rows"], 1), version, np.int64)}


def versioned_engine(size: int = 2, fail: tuple[str, ...] = ()) -> FakeEngine:
    return FakeEngine(size, compute=version_rows, fail_loads=fail)


def sent_loads(engine: FakeEngine) -> list[tuple[int, str, str]]:
    """(worker, model key, folder) of every LOAD sent."""
    return [(w, a["model"], Path((a.get("config") or {})["path"]).name) for w, a in engine.loads()]


@pytest.fixture
def repository(tmp_path: Path) -> Repository:
    """Model `clf` with versions 1, 2 and 3 (3, the highest, is the default)."""
    (tmp_path / "clf").mkdir()
    (tmp_path / "clf" / "model.yaml").write_text(YAML + "memory_mb: 6\n")
    for version in (1, 2, 3):
        (tmp_path / "clf" / str(version)).mkdir()
    return Repository.scan(tmp_path)


def answered(prediction: Any) -> int:
    return int(prediction.outputs["output-0"][0, 0])


def test_versions_resolve_to_the_default_or_their_own_state(repository: Repository) -> None:
    controller = Controller(repository, versioned_engine())
    default = controller.model("clf")
    assert default.config.version == 3 and controller.lifecycle.versions == {}
    assert controller.model("clf", "3") is default
    first = controller.model("clf", "1")
    assert (first.config.key, first.config.path.name, first.state) == ("clf@1", "1", READY)
    assert controller.model("clf", "1") is first and controller.model("clf", "01") is first
    assert controller.lifecycle.models == {"clf": default} and controller.lifecycle.versions == {
        "clf@1": first
    }
    assert controller.served("clf") is default and controller.served("clf", 3) is default
    assert controller.served("clf", 1) is first and controller.served("clf", 2) is None
    assert set(controller.lifecycle.stats) == {"clf@3", "clf@1"}
    with pytest.raises(ModelNotFound, match=r"'clf' has no version 7; it has \[1, 2, 3\]"):
        controller.model("clf", "7")
    for bad in ("x", "-1", "²"):
        with pytest.raises(InvalidInput, match="version must be an integer"):
            controller.model("clf", bad)
    assert "clf@7" not in controller.lifecycle.versions


def test_a_version_folder_added_after_the_scan_is_found(repository: Repository) -> None:
    controller = Controller(repository, versioned_engine())
    with pytest.raises(ModelNotFound, match=r"no version 4; it has \[1, 2, 3\]"):
        controller.model("clf", "4")
    with pytest.raises(ConfigError, match=r"'clf@4': no version 4; it has \[1, 2, 3\]"):
        parse_app("app", {"models": ["clf@4"]}, repository)
    (repository.root / "clf" / "4").mkdir()
    assert parse_app("app", {"models": ["clf@4"]}, repository).models == ("clf@4",)
    assert controller.model("clf", "4").config.path == repository.root / "clf" / "4"
    assert controller.model("clf").config.version == 3  # the default does not move


def test_each_version_answers_and_is_counted_under_its_own_key(repository: Repository) -> None:
    async def scenario() -> dict[str, Any]:
        engine = versioned_engine()
        controller = Controller(repository, engine)
        await controller.start()
        answers = {
            "default": answered(await infer(controller, "clf", ROW)),
            "3": answered(await infer(controller, "clf", ROW, version="3")),
            "1": answered(await infer(controller, "clf", ROW, version="1")),
            "2": answered(await infer(controller, "clf", ROW, version="2")),
            "1 again": answered(await infer(controller, "clf", ROW, version="1")),
        }
        prediction = await infer(controller, "clf", ROW, version="2")
        stats = {m.status.label: m for m in controller.statistics().models}
        metrics = render(controller).decode()
        loads = sent_loads(engine)
        await controller.stop()
        return {
            "answers": answers,
            "prediction": prediction,
            "stats": stats,
            "metrics": metrics,
            "loads": loads,
        }

    out = asyncio.run(scenario())
    assert out["answers"] == {"default": 3, "3": 3, "1": 1, "2": 2, "1 again": 1}
    assert (out["prediction"].model, out["prediction"].version) == ("clf", 2)
    # one LOAD per version, from its own folder, each placed on the least loaded worker
    assert out["loads"] == [(0, "clf@3", "3"), (1, "clf@1", "1"), (0, "clf@2", "2")]
    stats = out["stats"]
    assert set(stats) == {"clf", "clf@1", "clf@2"}
    assert (stats["clf"].status.version, stats["clf"].status.default) == (3, True)
    assert (stats["clf@1"].status.version, stats["clf@1"].status.default) == (1, False)
    assert (stats["clf"].counts.requests, stats["clf@1"].counts.requests) == (2, 2)
    assert stats["clf@2"].counts.requests == stats["clf@2"].counts.successes == 2
    assert 'headway_requests_total{model="clf"} 2.0' in out["metrics"]
    assert 'headway_requests_total{model="clf@1"} 2.0' in out["metrics"]
    assert 'headway_model_ready{model="clf@2"} 1.0' in out["metrics"]


def test_a_version_that_fails_to_load_fails_its_waiting_requests_at_once(
    repository: Repository,
) -> None:
    async def scenario() -> tuple[BaseException | None, str, str]:
        controller = Controller(repository, versioned_engine(fail=("clf@2",)))
        await controller.start()
        error: BaseException | None = None
        try:  # the first request waits for the load; the load fails
            await asyncio.wait_for(infer(controller, "clf", ROW, version="2", timeout=30), 10)
        except ModelNotReady as exc:
            error = exc
        state = controller.model("clf", "2")
        answer = answered(await infer(controller, "clf", ROW))
        await controller.stop()
        return error, f"{state.state}: {state.reason}", str(answer)

    error, state, default_answer = asyncio.run(scenario())
    assert error is not None and "weights file is corrupt" in str(error)
    assert state == f"{UNAVAILABLE}: failed to load: weights file is corrupt"
    assert default_answer == "3"  # the default version is untouched


def test_under_a_memory_budget_versions_load_on_demand_and_are_evicted(
    repository: Repository,
) -> None:
    async def scenario() -> tuple[list[int], dict[str, int], list[str]]:
        engine = versioned_engine(size=1)
        # 6 MB per version, 10 MB on the one worker: one version resident at a time
        controller = Controller(repository, engine, memory_budget_mb=10)
        await controller.start()
        answers = []
        for version in (None, "1", None, "2", "1"):
            prediction = await infer(controller, "clf", ROW, version=version, timeout=30)
            answers.append(answered(prediction))
        counters = vars(controller.scheduler.counters).copy()
        loads = [key for _, key, _ in sent_loads(engine)]
        await controller.stop()
        return answers, counters, loads

    answers, counters, loads = asyncio.run(scenario())
    assert answers == [3, 1, 3, 2, 1]
    assert loads == ["clf@3", "clf@1", "clf@3", "clf@2", "clf@1"]
    assert counters["loads"] == 5 and counters["evictions"] == 4


def test_an_app_pinning_versions_serves_them_from_its_creation(repository: Repository) -> None:
    controller = Controller(repository, versioned_engine())
    config = parse_app(
        "canary",
        {"models": ["clf@1", "clf@2"], "split": {"clf@1": 0.5, "clf@2": 0.5}},
        repository,
    )
    app = SelectionApplication(config, controller, rng=random.Random(0))
    assert set(controller.lifecycle.versions) == {"clf@1", "clf@2"}  # registered (and loading)
    assert app.ready_models() == ["clf@1", "clf@2"]
    pinned_default = SelectionApplication(parse_app("d", {"models": ["clf@3", "clf"]}), controller)
    assert set(controller.lifecycle.versions) == {"clf@1", "clf@2"}  # clf@3 is the default's state

    async def scenario() -> tuple[set[int], set[int]]:
        await controller.start()
        assert pinned_default.ready_models() == ["clf@3", "clf"]
        split = {(await app.predict([1.0, 1.0, 1.0, 1.0]))["output"] for _ in range(40)}
        app.registry.set_active("clf@1")  # the rollback
        rolled = {(await app.predict([1.0, 1.0, 1.0, 1.0]))["output"] for _ in range(20)}
        await controller.stop()
        return split, rolled

    split, rolled = asyncio.run(scenario())
    assert split == {1, 2} and rolled == {1}


def test_each_client_request_is_counted_once_as_it_is_settled_and_probes_are_not(
    repository: Repository,
) -> None:
    # successes and their latencies when answered, errors when failed (the waiting requests of
    # a version that fails to load), nothing for the controller's own warm-up runs
    async def scenario() -> dict[str, Any]:
        controller = Controller(repository, versioned_engine(fail=("clf@2",)))
        await controller.start()
        await asyncio.gather(*(infer(controller, "clf", ROW) for _ in range(5)))
        with pytest.raises(ModelNotReady):
            await asyncio.wait_for(infer(controller, "clf", ROW, version="2", timeout=30), 10)
        counted = {
            key: controller.model_statistics("clf", version).counts
            for key, version in (("clf@3", None), ("clf@2", "2"))
        }
        out = {
            key: (s.requests, s.successes, s.latency.count, dict(s.errors), s.failure_seconds)
            for key, s in counted.items()
        }
        await controller.stop()
        return out

    out = asyncio.run(scenario())
    assert out["clf@3"][:4] == (5, 5, 5, {})
    requests, successes, latencies, errors, failed_for = out["clf@2"]
    assert (requests, successes, latencies) == (1, 0, 0)
    assert sum(errors.values()) == 1 and failed_for > 0.0
