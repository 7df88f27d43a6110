"""The answer to one query: combined from the models that answered in time, or the default
(Clipper's best-effort combine: stragglers are left out, not waited for).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from headway.selection.losses import class_of, plain

NO_MODEL_READY = "no_model_ready"
NO_ANSWER = "no_answer"
LOW_CONFIDENCE = "low_confidence"
REASONS = (NO_MODEL_READY, NO_ANSWER, LOW_CONFIDENCE)


@dataclass(frozen=True)
class ModelAnswer:
    """A model's output with the confidence it reports itself (e.g. its top class probability)."""

    output: Any
    confidence: float | None = None


def unwrap(answer: Any) -> Any:
    """The output of an answer, whether wrapped in `ModelAnswer` or given bare."""
    return answer.output if isinstance(answer, ModelAnswer) else answer


def own_confidence(answer: Any) -> float:
    """The confidence a single model reports for its answer; 1.0 when it reports none.

    A model reports one either as `ModelAnswer(output, confidence)` or by answering a
    class-probability vector (a list of non-negative floats summing to 1), whose largest entry
    is its confidence.
    """
    if isinstance(answer, ModelAnswer):
        if answer.confidence is not None:
            return min(1.0, max(0.0, float(answer.confidence)))
        answer = answer.output
    output = plain(answer)
    if (
        isinstance(output, list)
        and isinstance(class_of(output), int)
        and min(output) >= 0.0
        and abs(sum(output) - 1.0) <= 1e-3
    ):
        return float(max(output))
    return 1.0


@dataclass(frozen=True)
class Decision:
    """What a query is answered with.

    `models` names the models that were queried *and* answered, `missing` those that did not. The
    default output is returned, flagged `default=True` with an explanation and a machine-readable
    `reason`, in three cases, checked in this order:

    1. no model was queried (none linked, or none ready): `"no model ready"`;
    2. none of the queried models answered: `"deadline passed with no answer"`;
    3. the combined confidence is below the application's threshold:
       `"confidence 0.4 below threshold 0.6"`."""

    output: Any
    confidence: float
    models: tuple[str, ...]
    default: bool = False
    explanation: str | None = None
    reason: str | None = None
    missing: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "confidence": self.confidence,
            "models": list(self.models),
            "default": self.default,
            "explanation": self.explanation,
            "reason": self.reason,
            "missing": list(self.missing),
        }


#: Combines the answers that arrived (model -> answer, in query order) into (output, confidence).
Merge = Callable[[dict[str, Any]], tuple[Any, float]]


def straggler_combine(
    queried: Sequence[str],
    answers: Mapping[str, Any],
    merge: Merge,
    *,
    default_output: Any = None,
    threshold: float = 0.0,
) -> Decision:
    """Combine the queried models that answered; fall back to the default output when needed.

    Answers from models that were not queried are ignored.
    """
    arrived = {model: answers[model] for model in queried if model in answers}
    missing = tuple(model for model in queried if model not in answers)
    if not queried:
        return Decision(default_output, 0.0, (), True, "no model ready", NO_MODEL_READY)
    if not arrived:
        return Decision(
            default_output, 0.0, (), True, "deadline passed with no answer", NO_ANSWER, missing
        )
    output, confidence = merge(arrived)
    if not math.isfinite(confidence):
        confidence = 0.0
    models = tuple(arrived)
    if confidence < threshold:
        explanation = f"confidence {confidence:.3g} below threshold {threshold:.3g}"
        return Decision(
            default_output, confidence, models, True, explanation, LOW_CONFIDENCE, missing
        )
    return Decision(output, confidence, models, False, None, None, missing)
