"""Straggler mitigation and default outputs: combine only what answered by the deadline."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from headway.selection import (
    LOW_CONFIDENCE,
    NO_ANSWER,
    NO_MODEL_READY,
    Policy,
    PolicyState,
    Selection,
    make_policy,
)


def _exp4(**options: Any) -> tuple[Policy, PolicyState]:
    policy = make_policy("exp4", ["a", "b", "c"], default_output="unknown", **options)
    state = PolicyState("exp4", log_weights={"a": 0.0, "b": math.log(0.875), "c": math.log(0.625)})
    return policy, state  # shares a 0.4, b 0.35, c 0.25


def test_combines_only_the_models_that_answered() -> None:
    policy, state = _exp4()
    queried = Selection(("a", "b", "c"), {"a": 1, "b": 1, "c": 1})
    # c missed the deadline: cat 0.4 (a) vs dog 0.35 (b) -> cat; confidence 0.4 of all queried
    decision = policy.combine(state, {"a": "cat", "b": "dog"}, queried)
    assert decision.output == "cat"
    assert decision.confidence == pytest.approx(0.4)
    assert decision.models == ("a", "b")
    assert decision.missing == ("c",)
    assert not decision.default


def test_answers_from_models_not_queried_are_ignored() -> None:
    policy, state = _exp4()
    decision = policy.combine(state, {"a": "cat", "z": "dog"}, ("a",))
    assert decision.models == ("a",)
    assert decision.output == "cat"


def test_no_answer_by_the_deadline_gives_the_default() -> None:
    policy, state = _exp4()
    decision = policy.combine(state, {}, ("a", "b", "c"))
    assert decision.default
    assert decision.output == "unknown"
    assert decision.explanation == "deadline passed with no answer"
    assert decision.reason == NO_ANSWER
    assert decision.missing == ("a", "b", "c")
    assert decision.confidence == 0.0


def test_low_confidence_gives_the_default() -> None:
    policy, state = _exp4(threshold=0.5)
    decision = policy.combine(state, {"a": "cat", "b": "dog"}, ("a", "b", "c"))
    assert decision.default
    assert decision.output == "unknown"
    assert decision.explanation == "confidence 0.4 below threshold 0.5"
    assert decision.reason == LOW_CONFIDENCE
    assert decision.confidence == pytest.approx(0.4)
    assert decision.models == ("a", "b")  # who took part is still reported
    # with c back in time, dog holds 0.6 >= 0.5
    decision = policy.combine(state, {"a": "cat", "b": "dog", "c": "dog"}, ("a", "b", "c"))
    assert (decision.output, decision.default) == ("dog", False)


def test_no_model_ready_gives_the_default() -> None:
    for name in ("fixed", "exp3", "exp4"):
        policy = make_policy(name, ["a", "b"], default_output=-1)
        state = policy.initial_state()
        selection = policy.select(state, random.Random(0), ready=[])
        assert selection.models == ()
        decision = policy.combine(state, {"a": 1}, selection)
        assert decision.default and decision.output == -1
        assert decision.explanation == "no model ready"
        assert decision.reason == NO_MODEL_READY


def test_an_app_with_no_models_has_no_model_ready() -> None:
    policy = make_policy("exp3", [])
    state = policy.initial_state()
    decision = policy.combine(state, {}, policy.select(state, random.Random(0)))
    assert decision.reason == NO_MODEL_READY


def test_a_single_model_below_the_threshold() -> None:
    policy = make_policy("exp3", ["a"], default_output=None, threshold=0.8)
    state = policy.initial_state()
    decision = policy.combine(state, {"a": [0.3, 0.6, 0.1]}, ("a",))
    assert decision.default and decision.output is None
    assert decision.explanation == "confidence 0.6 below threshold 0.8"
    assert decision.to_dict()["reason"] == LOW_CONFIDENCE
