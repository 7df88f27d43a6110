"""The fixed policy: one model, a weighted canary split, and rollback at run time."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from headway.selection import NO_MODEL_READY, Selection, StateRegistry, make_policy


def test_one_model_by_default() -> None:
    policy = make_policy("fixed", ["clf:1", "clf:2"])
    state = policy.initial_state()
    assert state.split == {"clf:1": 1.0, "clf:2": 0.0}
    rng = random.Random(0)
    selections = [policy.select(state, rng) for _ in range(100)]
    assert all(s == Selection(("clf:1",), {"clf:1": 1.0}) for s in selections)


def test_traffic_split_proportions() -> None:
    policy = make_policy("fixed", ["clf:1", "clf:2"], split={"clf:1": 9, "clf:2": 1})
    state = policy.initial_state()
    assert state.split == pytest.approx({"clf:1": 0.9, "clf:2": 0.1})
    rng = random.Random(42)
    counts = Counter(policy.select(state, rng).models[0] for _ in range(20_000))
    # binomial sd = sqrt(0.9 * 0.1 / 20000) = 0.0021; allow 0.01 (4.7 sd)
    assert counts["clf:2"] / 20_000 == pytest.approx(0.1, abs=0.01)


def test_rollback_and_canary_at_run_time() -> None:
    registry = StateRegistry(make_policy("fixed", ["clf:1", "clf:2"], active="clf:2"))
    rng = random.Random(3)
    assert registry.select(rng).models == ("clf:2",)

    registry.set_active("clf:1")  # rollback
    assert {registry.select(rng).models for _ in range(500)} == {("clf:1",)}

    registry.set_split({"clf:1": 0.5, "clf:2": 0.5})  # canary again
    counts = Counter(registry.select(rng).models[0] for _ in range(4_000))
    assert counts["clf:2"] / 4_000 == pytest.approx(0.5, abs=0.03)

    # the split persists with the state
    restored = StateRegistry.from_dict(registry.to_dict())
    assert restored.app.split == {"clf:1": 0.5, "clf:2": 0.5}


def test_split_rejects_unknown_models_and_empty_weights() -> None:
    policy = make_policy("fixed", ["a", "b"])
    state = policy.initial_state()
    with pytest.raises(ValueError, match="not linked: z"):
        policy.set_split(state, {"z": 1.0})
    with pytest.raises(ValueError, match="positive weight"):
        policy.set_split(state, {"a": 0.0})
    with pytest.raises(ValueError, match="either"):
        make_policy("fixed", ["a"], split={"a": 1}, active="a")


def test_never_falls_back_to_a_version_it_was_not_told_to_serve() -> None:
    policy = make_policy("fixed", ["clf:1", "clf:2"], active="clf:2")
    state = policy.initial_state()
    selection = policy.select(state, random.Random(0), ready={"clf:1"})
    assert selection == Selection(())
    decision = policy.combine(state, {}, selection)
    assert decision.default and decision.reason == NO_MODEL_READY


def test_split_over_the_ready_models_only() -> None:
    policy = make_policy("fixed", ["a", "b", "c"], split={"a": 0.5, "b": 0.25, "c": 0.25})
    state = policy.initial_state()
    selection = policy.select(state, random.Random(0), ready={"b", "c"})
    assert selection.probabilities == {selection.models[0]: pytest.approx(0.5)}


def test_feedback_is_scored_but_changes_nothing() -> None:
    policy = make_policy("fixed", ["a"])
    state = policy.initial_state()
    assert policy.observe(state, 1, {"a": 2}, Selection(("a",), {"a": 1.0})) == {"a": 1.0}
    assert state.split == {"a": 1.0} and state.updates == 0


def test_a_new_model_gets_no_traffic_and_removing_keeps_proportions() -> None:
    policy = make_policy("fixed", ["a", "b", "c"], split={"a": 2, "b": 1, "c": 1})
    state = policy.initial_state()
    policy.add_model(state, "d")
    assert state.split["d"] == 0.0
    policy.remove_model(state, "c")
    assert state.split == pytest.approx({"a": 2 / 3, "b": 1 / 3, "d": 0.0})
