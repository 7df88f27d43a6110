"""Applications over a stub controller: response shapes, stragglers by event order, feedback
joined by query id or by input and user, per-user state, the feedback log, and a restart.

The stub controller answers from plain functions of the input's first value, reads time from
an injected `ManualClock` (each model call takes a stated number of clock seconds, so latency
statistics are exact), and a model can be held back on an `asyncio.Event`: a straggler is a
model that has not answered yet, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import math
import random
from pathlib import Path
from typing import Any

import pytest
from tests.apps.stubs import StubController, StubModel

from headway.apps import AppRegistry, SelectionApplication, parse_app
from headway.store import Store
from headway.store.apps import AppStore

KEYS = {"query_id", "output", "default", "confidence", "models"}


def _app(
    controller: StubController, late: set[asyncio.Task[Any]] | None = None, **raw: Any
) -> SelectionApplication:
    config, rng = parse_app("app", raw), random.Random(0)
    return SelectionApplication(config, controller, rng=rng, late=late)


def test_answers_have_the_shape_of_the_issue_one_row_or_many() -> None:
    controller = StubController(a=StubModel(int), b=StubModel(int, seconds=0.03))
    app = _app(controller, models=["a", "b"], policy="exp4", default_output=-1)

    async def run() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return await app.predict([3.0]), await app.predict_many([[1.0], [2.0]])

    one, many = asyncio.run(run())
    assert set(one) == KEYS
    assert (one["output"], one["default"], one["confidence"], one["models"]) == (
        3,
        False,
        pytest.approx(1.0),
        ["a", "b"],
    )
    assert [set(answer) for answer in many] == [KEYS, KEYS]
    assert [answer["output"] for answer in many] == [1, 2]
    assert len({one["query_id"], *(answer["query_id"] for answer in many)}) == 3
    # latency by the injected clock: the models ran one after the other, 10 ms then 30 ms
    stats = app.statistics()
    latency = {m["model"]: m["latency"]["p50_ms"] for m in stats["models"]}
    assert latency == {"a": pytest.approx(10.0), "b": pytest.approx(30.0)}
    assert stats["decisions"] == 3 and stats["default_rate"] == 0.0


def test_a_straggler_is_left_out_at_the_deadline_and_still_finishes() -> None:
    async def run() -> None:
        gate = asyncio.Event()
        controller = StubController(fast=StubModel(int), slow=StubModel(lambda x: 9, gate=gate))
        pair = {"models": ["fast", "slow"], "policy": "exp4", "default_output": -1, "slo_ms": 20}
        late: set[asyncio.Task[Any]] = set()  # the calls still running, as AppRegistry keeps
        app = _app(controller, late, **pair)
        strict = _app(controller, late, **pair, confidence_threshold=0.6)
        alone = _app(controller, late, models=["slow"], default_output=-1, slo_ms=20)

        answer = await app.predict([4.0])
        assert (answer["output"], answer["models"], answer["missing"]) == (4, ["fast"], ["slow"])
        assert answer["default"] is False and answer["confidence"] == pytest.approx(0.5)

        answer = await strict.predict([4.0])  # half the weight answered: below 0.6
        assert (answer["output"], answer["default"], answer["models"]) == (-1, True, ["fast"])
        assert answer["default_explanation"] == "confidence 0.5 below threshold 0.6"

        answer = await alone.predict([4.0])
        assert (answer["output"], answer["default"], answer["models"]) == (-1, True, [])
        assert answer["default_explanation"] == "deadline passed with no answer"

        controller.models["slow"].state = "UNLOADED"
        answer = await alone.predict([4.0])
        assert answer["default"] and answer["default_explanation"] == "no model ready"

        # the late calls were not cancelled: released, all three finish (and would be cached)
        assert controller.models["slow"].finished == 0 and len(late) == 3
        gate.set()
        while late:
            await asyncio.sleep(0)
        assert controller.models["slow"].finished == 3
        calls = {m["model"]: m for m in app.statistics()["models"]}
        assert (calls["fast"]["in_time"], calls["slow"]["late"]) == (1, 1)
        assert alone.statistics()["default_reasons"] == {
            "no_answer": 1,
            "no_model_ready": 1,
            "low_confidence": 0,
        }

    asyncio.run(run())


PERSONAL = {"models": ["a", "b"], "policy": "exp4", "eta": 0.5, "personalize": True}
REGRESSION = {"models": ["a", "b"], "policy": "exp4", "task": "regression"}


def _controller() -> StubController:
    # a answers the input, b the input plus one, r (a regressor) the input plus ten
    return StubController(
        a=StubModel(lambda x: x), b=StubModel(lambda x: x + 1), r=StubModel(lambda x: x + 10)
    )


def _learned(apps: AppRegistry) -> dict[str, Any]:
    """What the apps have learned: log weights (app-wide and per user), feedback counted."""
    personal, reg = apps.get("personal").registry, apps.get("reg").registry
    return {
        "users": {user: dict(state.log_weights) for user, state in personal.users.items()},
        "app": dict(personal.app.log_weights),
        "reg": dict(reg.app.log_weights),
        "feedback": personal.stats.feedback + reg.stats.feedback,
    }


def test_feedback_by_query_id_or_input_and_user_is_learned_logged_and_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    declared = {
        "personal": parse_app("personal", PERSONAL),
        "reg": parse_app("reg", {**REGRESSION, "models": ["a", "r"]}),
    }

    async def first_run() -> dict[str, Any]:
        store = Store(path)
        apps = AppRegistry(_controller(), store, declared)
        await apps.start()
        app = apps.get("personal")
        # ann's label follows a: b is wrong, loses eta * 1 = 0.5, in ann's and the app's state
        ann = await app.predict([3.0], "ann")
        result = await apps.feedback("personal", 3, query_id=ann["query_id"])
        assert result["user"] == "ann" and result["losses"] == {"a": 0.0, "b": 1.0}
        assert app.registry.users["ann"].log_weights == pytest.approx({"a": 0.0, "b": -0.5})
        # bob's label follows b; no query id: joined by input and user. His state starts as a
        # copy of the app-wide one (b -0.5), then a loses 0.5: level again
        bob = await app.predict([5.0], "bob")
        result = await apps.feedback("personal", 6, value=[5.0], user="bob")
        assert result["query_id"] == bob["query_id"] and result["losses"] == {"a": 1.0, "b": 0.0}
        assert app.registry.users["bob"].log_weights == pytest.approx({"a": 0.0, "b": 0.0})
        assert app.registry.app.log_weights == pytest.approx({"a": 0.0, "b": 0.0})
        assert app.registry.users["ann"].log_weights == pytest.approx({"a": 0.0, "b": -0.5})
        assert app.user_view("ann")["weights"]["a"] == pytest.approx(1 / (1 + math.exp(-0.5)))

        # a regressor's loss: min(1, |y - label| / the range of the labels seen)
        reg = apps.get("reg")
        await reg.predict([0.0])
        first = await apps.feedback("reg", 0.0, value=[0.0])
        assert first["losses"] == {"a": 0.0, "r": 1.0}  # one label, no range yet: 0/1
        answer = await reg.predict([50.0])
        # weights 1 and e^-0.01: mean (50 + 60 e^-0.01) / (1 + e^-0.01)
        w = math.exp(-0.01)
        assert answer["output"] == pytest.approx((50 + 60 * w) / (1 + w))
        second = await apps.feedback("reg", 50.0, query_id=answer["query_id"])
        assert second["losses"] == {"a": 0.0, "r": pytest.approx(10 / 50)}

        log = AppStore(store).feedback("personal")
        assert [(row.user, row.query_id, row.label) for row in log] == [
            ("ann", ann["query_id"], 3),
            ("bob", bob["query_id"], 6),
        ]
        assert AppStore(store).feedback_count("reg") == 2
        kept = _learned(apps)
        await apps.stop()
        store.close()
        return kept

    async def second_run() -> dict[str, Any]:
        store = Store(path)
        apps = AppRegistry(_controller(), store, declared)
        await apps.start()
        kept = _learned(apps)
        await apps.stop()
        store.close()
        return kept

    before = asyncio.run(first_run())
    after = asyncio.run(second_run())
    assert before["users"]["ann"]["b"] == pytest.approx(-0.5) and before["feedback"] == 4
    assert after == before
