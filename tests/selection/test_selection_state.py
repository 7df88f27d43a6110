"""Selection state: JSON round trips, new models at the mean weight, the registry, statistics."""

from __future__ import annotations

import json
import math
import random

import pytest

from headway.selection import (
    NO_ANSWER,
    PolicyState,
    Selection,
    StateRegistry,
    make_policy,
)


def test_a_new_model_starts_at_the_mean_weight() -> None:
    policy = make_policy("exp3", ["a", "b"])
    state = PolicyState("exp3", log_weights={"a": 0.0, "b": math.log(0.5)})
    policy.add_model(state, "c")
    # weights 1, 0.5 -> mean 0.75; shares 1 / 2.25, 0.5 / 2.25, 0.75 / 2.25
    assert math.exp(state.log_weights["c"]) == pytest.approx(0.75)
    assert policy.weights(state) == pytest.approx({"a": 4 / 9, "b": 2 / 9, "c": 1 / 3})
    policy.add_model(state, "c")  # already there: no-op
    assert math.exp(state.log_weights["c"]) == pytest.approx(0.75)


def test_registry_adds_a_model_to_every_state_at_its_own_mean() -> None:
    registry = StateRegistry(make_policy("exp4", ["a", "b"], eta=1.0), personalize=True)
    everyone = Selection(("a", "b"), {"a": 1.0, "b": 1.0})
    registry.observe(1, {"a": 1, "b": 0}, everyone, user="u")  # u: b -1; app: b -1
    registry.observe(1, {"a": 1, "b": 0}, everyone)  # app only: b -2
    registry.add_model("c")
    # app: weights 1, e^-2 -> mean (1 + 0.1353353) / 2 = 0.5676676
    assert math.exp(registry.app.log_weights["c"]) == pytest.approx(0.5676676)
    # u: weights 1, e^-1 -> mean (1 + 0.3678794) / 2 = 0.6839397
    assert math.exp(registry.users["u"].log_weights["c"]) == pytest.approx(0.6839397)
    assert registry.policy.models == ["a", "b", "c"]
    registry.remove_model("a")
    assert registry.app.models == ["b", "c"] and registry.users["u"].models == ["b", "c"]


def _drive(registry: StateRegistry, rng: random.Random, world: random.Random, n: int) -> list:
    trace = []
    for _ in range(n):
        user = f"user-{world.randrange(5)}"
        label = world.randrange(3)
        selection = registry.select(rng, user=user, ready={"a", "b", "c"})
        answers = {m: (label if world.random() < 0.7 else 0) for m in selection.models}
        decision = registry.combine(answers, selection, user=user)
        registry.observe(label, answers, selection, user=user)
        trace.append((selection, decision))
    return trace


@pytest.mark.parametrize("name", ["fixed", "exp3", "exp4"])
def test_round_trip_gives_identical_subsequent_decisions(name: str) -> None:
    options = {"split": {"a": 0.5, "b": 0.3, "c": 0.2}} if name == "fixed" else {"eta": 0.2}
    registry = StateRegistry(
        make_policy(name, ["a", "b", "c"], default_output=-1, threshold=0.3, **options),
        personalize=True,
    )
    _drive(registry, random.Random(1), random.Random(2), 300)

    data = json.loads(json.dumps(registry.to_dict()))  # JSON-able, and survives JSON
    restored = StateRegistry.from_dict(data)
    assert restored.to_dict() == registry.to_dict()

    original = _drive(registry, random.Random(3), random.Random(4), 200)
    again = _drive(restored, random.Random(3), random.Random(4), 200)
    assert original == again
    assert restored.to_dict() == registry.to_dict()


def test_state_dict_format() -> None:
    policy = make_policy("exp3", ["a", "b"], task="regression")
    state = policy.initial_state()
    policy.observe(state, 10.0, {"a": 12.0}, Selection(("a",), {"a": 0.5}))
    # the first label gives no range yet, so the loss is 0/1: 12 != 10 costs 1, and
    # a (chosen with p = 0.5) loses 0.01 * 1 / 0.5 = 0.02
    assert state.to_dict() == {
        "format": 1,
        "policy": "exp3",
        "log_weights": {"a": -0.02, "b": 0.0},
        "split": {},
        "labels": {"low": 10.0, "high": 10.0},
        "updates": 1,
    }
    assert PolicyState.from_dict(state.to_dict()) == state
    with pytest.raises(ValueError, match="format"):
        PolicyState.from_dict({**state.to_dict(), "format": 99})
    with pytest.raises(ValueError, match="exp4"):
        make_policy("exp4", ["a"]).select(state, random.Random(0))


def test_a_restored_state_is_reconciled_with_the_linked_models() -> None:
    data = StateRegistry(make_policy("exp3", ["a", "b"])).to_dict()
    data["policy"]["models"] = ["b", "c"]  # a unlinked, c linked while it was stored
    restored = StateRegistry.from_dict(data)
    assert restored.app.models == ["b", "c"]


def test_fixed_ignores_personalize() -> None:
    registry = StateRegistry(make_policy("fixed", ["a"]), personalize=True)
    registry.observe(1, {"a": 1}, Selection(("a",), {"a": 1.0}), user="u")
    assert registry.users == {} and registry.state_for("u") is registry.app


def test_make_policy_by_name_and_from_its_config() -> None:
    for name in ("fixed", "exp3", "exp4"):
        policy = make_policy(name, ["a", "b"], threshold=0.5, default_output="?")
        assert make_policy(**policy.config()).config() == policy.config()
    with pytest.raises(ValueError, match="unknown selection policy 'ucb'"):
        make_policy("ucb", ["a"])
    with pytest.raises(ValueError, match="eta"):
        make_policy("exp3", ["a"], eta=0)
    with pytest.raises(ValueError, match="twice"):
        make_policy("exp4", ["a", "a"])


def test_statistics() -> None:
    registry = StateRegistry(make_policy("exp4", ["a", "b"], threshold=0.6), window=3)
    rng = random.Random(0)
    for answers, label in [
        ({"a": 1, "b": 1}, 1),  # both right
        ({"a": 1, "b": 2}, 1),  # a right, b wrong: each holds ~0.5 < 0.6 -> default
        ({}, 1),  # nobody in time -> default
        ({"a": 0, "b": 1}, 1),  # a (0.5025 of the weight) outvotes b, still < 0.6 -> default
        ({"a": 1, "b": 1}, 1),
    ]:
        selection = registry.select(rng)
        registry.combine(answers, selection)
        registry.observe(label, answers, selection)
    stats = registry.statistics()
    assert (stats.selections, stats.decisions, stats.defaults, stats.feedback) == (5, 5, 3, 5)
    assert stats.default_rate == pytest.approx(0.6)
    assert stats.default_reasons[NO_ANSWER] == 1
    assert stats.default_reasons["low_confidence"] == 2
    a, b = stats.models
    assert (a.model, a.selected, a.selection_share) == ("a", 5, 1.0)
    # windows of 3 judged events: a [0, 1, 0] -> 2/3; b [1, 0, 0] -> 2/3
    assert a.feedback == 3 and a.accuracy == pytest.approx(2 / 3)
    assert b.accuracy == pytest.approx(2 / 3)
    assert a.weight + b.weight == pytest.approx(1.0)
    assert json.loads(json.dumps(stats.to_dict()))["defaults"] == 3


def test_selection_round_trip() -> None:
    selection = Selection(("a",), {"a": 0.25})
    assert Selection.from_dict(json.loads(json.dumps(selection.to_dict()))) == selection


def test_fixed_registry_survives_unlinking_its_configured_model() -> None:
    registry = StateRegistry(make_policy("fixed", ["a", "b"], split={"a": 0.5, "b": 0.5}))
    registry.remove_model("a")
    restored = StateRegistry.from_dict(json.loads(json.dumps(registry.to_dict())))
    assert restored.app.split == {"b": 1.0}
    assert restored.policy.models == ["b"]
