"""Exp3's update rule, selection probabilities and confidence, against hand-computed values."""

from __future__ import annotations

import math
import random

import pytest

from headway.selection import Exp3Policy, ModelAnswer, PolicyState, Selection, make_policy


def test_update_divides_the_loss_by_the_chosen_probability() -> None:
    policy = make_policy("exp3", ["a", "b", "c"])  # eta = 0.01
    state = policy.initial_state()
    assert policy.weights(state) == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})

    # b was chosen with p = 1/3 and answered wrong (0/1 loss = 1):
    #   log w_b = 0 - 0.01 * 1 / (1/3) = -0.03
    #   w = (1, e^-0.03, 1) = (1, 0.9704455, 1); sum = 2.9704455
    #   shares = (1, 0.9704455, 1) / 2.9704455 = (0.3366498, 0.3267003, 0.3366498)
    losses = policy.observe(state, 1, {"b": 0}, Selection(("b",), {"b": 1 / 3}))
    assert losses == {"b": 1.0}
    assert state.log_weights == pytest.approx({"a": 0.0, "b": -0.03, "c": 0.0})
    assert policy.weights(state) == pytest.approx(
        {"a": 0.3366498, "b": 0.3267003, "c": 0.3366498}, abs=1e-7
    )

    # a was chosen with p = 0.3366498 and answered wrong:
    #   log w_a = 0 - 0.01 / 0.3366498 = -0.0297045
    #   renormalised so the largest (c) is 0: a = -0.0297045, b = -0.03, c = 0
    p_a = policy.weights(state)["a"]
    policy.observe(state, 1, {"a": 7}, Selection(("a",), {"a": p_a}))
    assert state.log_weights["a"] == pytest.approx(-0.0297045, abs=1e-7)
    assert state.log_weights["c"] == 0.0

    # c was chosen and answered right: loss 0, no change
    before = dict(state.log_weights)
    policy.observe(state, 1, {"c": 1}, Selection(("c",), {"c": 0.34}))
    assert state.log_weights == before
    assert state.updates == 3


def test_a_correct_answer_changes_nothing_and_only_the_chosen_model_moves() -> None:
    policy = make_policy("exp3", ["a", "b"], eta=0.5)
    state = policy.initial_state()
    # a wrong with p = 0.25: log w_a = -0.5 * 1 / 0.25 = -2; b untouched
    policy.observe(state, "x", {"a": "y", "b": "y"}, Selection(("a",), {"a": 0.25}))
    assert state.log_weights == pytest.approx({"a": -2.0, "b": 0.0})
    # shares: 1 / (1 + e^2) = 0.1192029 for a
    assert policy.weights(state)["a"] == pytest.approx(0.1192029, abs=1e-7)


def test_select_draws_in_proportion_to_weight() -> None:
    policy = make_policy("exp3", ["a", "b"])
    state = PolicyState("exp3", log_weights={"a": 0.0, "b": math.log(0.25)})  # p = 0.8, 0.2
    rng = random.Random(1)
    picks = [policy.select(state, rng) for _ in range(20_000)]
    share_b = sum(s.models == ("b",) for s in picks) / len(picks)
    assert share_b == pytest.approx(0.2, abs=0.01)  # 3.5 sigma
    assert sorted({round(s.probabilities[s.models[0]], 9) for s in picks}) == [0.2, 0.8]


def test_select_renormalises_over_the_ready_models() -> None:
    policy = make_policy("exp3", ["a", "b", "c"])
    state = PolicyState("exp3", log_weights={"a": 0.0, "b": math.log(0.5), "c": math.log(0.5)})
    selection = policy.select(state, random.Random(0), ready={"b", "c"})
    # only b and c are ready, with equal weight: whichever is chosen had p = 0.5
    assert selection.models[0] in {"b", "c"}
    assert selection.probabilities == {selection.models[0]: pytest.approx(0.5)}
    assert policy.select(state, random.Random(0), ready=set()) == Selection(())


def test_no_update_when_the_chosen_model_did_not_answer() -> None:
    policy = make_policy("exp3", ["a", "b"])
    state = policy.initial_state()
    assert policy.observe(state, 1, {}, Selection(("a",), {"a": 0.5})) == {}
    assert state.log_weights == {"a": 0.0, "b": 0.0}
    assert state.updates == 0


def test_confidence_is_the_chosen_models_own() -> None:
    policy = make_policy("exp3", ["a"])
    state = policy.initial_state()
    chosen = Selection(("a",), {"a": 1.0})
    assert policy.combine(state, {"a": 3}, chosen).confidence == 1.0  # reports none
    reported = policy.combine(state, {"a": ModelAnswer("cat", 0.7)}, chosen)
    assert (reported.output, reported.confidence) == ("cat", 0.7)
    vector = policy.combine(state, {"a": [0.1, 0.7, 0.2]}, chosen)
    assert vector.output == [0.1, 0.7, 0.2]  # passed through as the model answered it
    assert vector.confidence == pytest.approx(0.7)
    logits = policy.combine(state, {"a": [-2.0, 0.5, 0.1]}, chosen)  # not probabilities
    assert logits.confidence == 1.0


def test_weights_stay_finite_and_positive_after_many_updates() -> None:
    policy = Exp3Policy(["a", "b"], eta=1.0, min_weight=1e-6)
    state = policy.initial_state()
    for _ in range(100_000):
        # a tiny recorded probability makes each step enormous: -1.0 * 1 / 1e-9 = -1e9
        policy.observe(state, 0, {"a": 1}, Selection(("a",), {"a": 1e-9}))
    assert state.log_weights["a"] == pytest.approx(math.log(1e-6))
    assert all(math.isfinite(w) for w in state.log_weights.values())
    assert 0 < policy.weights(state)["a"] < 1e-5
