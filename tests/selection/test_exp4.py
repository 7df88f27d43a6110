"""Exp4's update rule, weighted vote / mean and agreement confidence, against hand computation."""

from __future__ import annotations

import math
import random

import pytest

from headway.selection import PolicyState, Selection, make_policy


def _state(**weights: float) -> PolicyState:
    return PolicyState("exp4", log_weights={m: math.log(w) for m, w in weights.items()})


def test_every_answering_model_is_updated_with_its_own_loss() -> None:
    policy = make_policy("exp4", ["a", "b", "c"])  # eta = 0.01
    state = policy.initial_state()
    selection = policy.select(state, random.Random(0))
    assert selection == Selection(("a", "b", "c"), {"a": 1.0, "b": 1.0, "c": 1.0})

    # label 1: a right, b wrong, c right -> log w_b = 0 - 0.01 * 1 = -0.01
    #   w = (1, e^-0.01, 1) = (1, 0.9900498, 1); shares = (0.3344426, 0.3311148, 0.3344426)
    losses = policy.observe(state, 1, {"a": 1, "b": 0, "c": 1}, selection)
    assert losses == {"a": 0.0, "b": 1.0, "c": 0.0}
    assert state.log_weights == pytest.approx({"a": 0.0, "b": -0.01, "c": 0.0})
    assert policy.weights(state) == pytest.approx(
        {"a": 0.3344426, "b": 0.3311148, "c": 0.3344426}, abs=1e-7
    )


def test_the_update_does_not_divide_by_the_weight_share() -> None:
    # b holds 1/11 of the weight. Hedge: log w_b -= eta * 1 = 0.1 whatever its share.
    # (Exp3's rule would take 0.1 / (1/11) = 1.1 off it.)
    policy = make_policy("exp4", ["a", "b"], eta=0.1)
    state = _state(a=1.0, b=0.1)
    policy.observe(state, "x", {"a": "x", "b": "y"}, Selection(("a", "b"), {"a": 1, "b": 1}))
    assert state.log_weights["b"] == pytest.approx(math.log(0.1) - 0.1)
    assert state.log_weights["a"] == 0.0


def test_a_model_that_did_not_answer_is_not_updated() -> None:
    policy = make_policy("exp4", ["a", "b"])
    state = policy.initial_state()
    losses = policy.observe(state, 1, {"a": 0}, Selection(("a", "b"), {"a": 1, "b": 1}))
    assert losses == {"a": 1.0}
    # a lost 0.01; renormalised, b stays the largest (0)
    assert state.log_weights == pytest.approx({"a": -0.01, "b": 0.0})


def test_weighted_vote_and_its_confidence() -> None:
    policy = make_policy("exp4", ["a", "b", "c"])
    state = _state(a=0.4, b=0.35, c=0.25)
    queried = ("a", "b", "c")
    # cat: 0.4; dog: 0.35 + 0.25 = 0.6 -> dog, confidence 0.6 / 1.0
    decision = policy.combine(state, {"a": "cat", "b": "dog", "c": "dog"}, queried)
    assert decision.output == "dog"
    assert decision.confidence == pytest.approx(0.6)
    assert decision.models == ("a", "b", "c")
    assert not decision.default


def test_vote_on_probability_vectors_uses_their_argmax() -> None:
    policy = make_policy("exp4", ["a", "b", "c"])
    state = _state(a=0.4, b=0.35, c=0.25)
    answers = {"a": [0.6, 0.4], "b": [0.3, 0.7], "c": [0.45, 0.55]}
    decision = policy.combine(state, answers, ("a", "b", "c"))
    # class 1 (b, c) holds 0.6; the answer is the heaviest class-1 voter's own vector, b's
    assert decision.output == [0.3, 0.7]
    assert decision.confidence == pytest.approx(0.6)


def test_regression_weighted_mean_and_agreement_within_tolerance() -> None:
    policy = make_policy("exp4", ["a", "b", "c"], task="regression", scale=10.0, tolerance=0.1)
    state = _state(a=0.5, b=0.3, c=0.2)
    decision = policy.combine(state, {"a": 10.0, "b": 12.0, "c": 20.0}, ("a", "b", "c"))
    # mean = 0.5*10 + 0.3*12 + 0.2*20 = 5 + 3.6 + 4 = 12.6
    # agree if |y_i - 12.6| <= 0.1 * 10 = 1: a (2.6) no, b (0.6) yes, c (7.4) no -> 0.3
    assert decision.output == pytest.approx(12.6)
    assert decision.confidence == pytest.approx(0.3)


def test_regression_mean_of_list_outputs_is_elementwise() -> None:
    policy = make_policy("exp4", ["a", "b"], task="regression", scale=100.0)
    state = _state(a=0.75, b=0.25)
    decision = policy.combine(state, {"a": [0.0, 4.0], "b": [4.0, 8.0]}, ("a", "b"))
    assert decision.output == pytest.approx([1.0, 5.0])
    assert decision.confidence == pytest.approx(1.0)  # both within 0.1 * 100 = 10


def test_weights_never_underflow() -> None:
    policy = make_policy("exp4", ["good", "bad"], eta=5.0)
    state = policy.initial_state()
    selection = Selection(("good", "bad"), {"good": 1.0, "bad": 1.0})
    for _ in range(50_000):
        policy.observe(state, 1, {"good": 1, "bad": 0}, selection)
    share = policy.weights(state)["bad"]
    # floored at min_weight (1e-3) of the largest: share = 1e-3 / (1 + 1e-3)
    assert share == pytest.approx(1e-3 / (1 + 1e-3))
    # and it can come back: the gap ln(1000) = 6.9 closes at 5.0 per event -> 2 events
    for _ in range(2):
        policy.observe(state, 1, {"good": 0, "bad": 1}, selection)
    assert policy.weights(state)["bad"] > 0.5


def test_the_worked_example_in_the_docs() -> None:
    # docs/selection.md, "Worked example": shares 0.40, 0.35, 0.25, threshold 0.5, default -1
    policy = make_policy("exp4", ["a", "b", "c"], threshold=0.5, default_output=-1)
    state = _state(a=1.0, b=0.875, c=0.625)
    selection = policy.select(state, random.Random(0), ready={"a", "b", "c"})
    assert selection.models == ("a", "b", "c")
    decision = policy.combine(state, {"a": 7, "b": 1}, selection)  # c is late
    assert (decision.output, decision.default) == (-1, True)
    assert decision.confidence == pytest.approx(0.4)
    assert decision.explanation == "confidence 0.4 below threshold 0.5"
    assert (decision.models, decision.missing) == (("a", "b"), ("c",))
    in_time = policy.combine(state, {"a": 7, "b": 1, "c": 1}, selection)
    assert (in_time.output, in_time.confidence) == (1, pytest.approx(0.6))

    policy.observe(state, 1, {"a": 7, "b": 1}, selection)
    assert state.log_weights == pytest.approx({"a": 0.0, "b": -0.1235, "c": -0.4600}, abs=1e-4)
    assert policy.weights(state) == pytest.approx({"a": 0.3976, "b": 0.3514, "c": 0.2510}, abs=1e-4)


def test_the_worked_example_over_http_in_the_docs() -> None:
    # docs/selection.md, "Worked example over HTTP": uniform weights, threshold 0.6
    models = ["digits-logreg", "digits-forest", "digits-nb"]
    policy = make_policy("exp4", models, threshold=0.6, default_output=-1)
    state = policy.initial_state()
    everyone = policy.select(state, random.Random(0))
    first = policy.combine(state, dict(zip(models, [3, 3, 5], strict=True)), everyone)
    assert (first.output, first.confidence) == (3, pytest.approx(2 / 3))
    losses = policy.observe(state, 5, dict(zip(models, [3, 3, 5], strict=True)), everyone)
    assert losses == {"digits-logreg": 1.0, "digits-forest": 1.0, "digits-nb": 0.0}
    assert policy.weights(state) == pytest.approx(
        {"digits-logreg": 0.3322, "digits-forest": 0.3322, "digits-nb": 0.3356}, abs=1e-4
    )
    late = policy.combine(state, {"digits-logreg": 3, "digits-nb": 5}, everyone)
    assert (late.output, late.default, late.missing) == (-1, True, ("digits-forest",))
    assert late.explanation == "confidence 0.336 below threshold 0.6"
