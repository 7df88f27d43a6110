"""Losses in [0, 1] that the selection policies learn from: 0/1 on the predicted class for
classification, the scaled absolute error for regression (`LossRule`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Literal

Task = Literal["classification", "regression"]
TASKS: tuple[Task, ...] = ("classification", "regression")


def plain(value: Any) -> Any:
    """`value` with numpy arrays and scalars turned into Python lists and numbers."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and not isinstance(value, list | tuple | str | bytes):
        return tolist()
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def class_of(output: Any) -> Hashable:
    """The class an output predicts, in a hashable form that votes can count."""
    output = plain(output)
    if isinstance(output, list):
        if (
            output
            and all(_is_number(x) for x in output)
            and any(isinstance(x, float) for x in output)
        ):
            return max(range(len(output)), key=output.__getitem__)
        return tuple(class_of(item) for item in output)
    if isinstance(output, dict):
        return tuple(sorted((key, class_of(item)) for key, item in output.items()))
    return output  # type: ignore[no-any-return]


def numbers(value: Any) -> list[float]:
    """A regression output or label as a flat list of floats; ValueError if it is not numeric."""
    value = plain(value)
    items = value if isinstance(value, list) else [value]
    if not items or not all(_is_number(x) for x in items):
        raise ValueError(
            f"a regression output must be a number or a list of numbers, not {value!r}"
        )
    return [float(x) for x in items]


def absolute_error(output: Any, label: Any) -> float:
    """|ŷ - y|, averaged over the elements of list outputs."""
    predicted, truth = numbers(output), numbers(label)
    if len(predicted) != len(truth):
        raise ValueError(f"output has {len(predicted)} values but the label has {len(truth)}")
    return sum(abs(p - t) for p, t in zip(predicted, truth, strict=True)) / len(truth)


def zero_one_loss(output: Any, label: Any) -> float:
    """0 when the output predicts the label's class, else 1."""
    return 0.0 if class_of(output) == class_of(label) else 1.0


def scaled_absolute_loss(output: Any, label: Any, scale: float) -> float:
    """`min(1, |ŷ - y| / scale)`; with no scale (0) the loss is 0/1 on exact agreement."""
    try:
        error = absolute_error(output, label)
    except ValueError:
        return 1.0
    if not math.isfinite(error):
        return 1.0
    if scale <= 0:
        return 0.0 if error == 0 else 1.0
    return min(1.0, error / scale)


@dataclass
class LabelRange:
    """The smallest and largest regression label seen: the default loss scale."""

    low: float | None = None
    high: float | None = None

    def update(self, label: Any) -> None:
        values = numbers(label)
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"a regression label must be finite, not {label!r}")
        low, high = min(values), max(values)
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    @property
    def span(self) -> float:
        if self.low is None or self.high is None:
            return 0.0
        return self.high - self.low

    def to_dict(self) -> dict[str, float | None]:
        return {"low": self.low, "high": self.high}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabelRange:
        low, high = data.get("low"), data.get("high")
        return cls(None if low is None else float(low), None if high is None else float(high))


@dataclass(frozen=True)
class LossRule:
    """How one application scores an output against a label.

    - **Classification**: 0/1 loss on the predicted class. An output that is a list holding floats
      (a class-probability vector) predicts its argmax; any other output is compared as it is
      (lists as tuples), so `"cat"`, `3` and `[1, 2]` are all classes.
    - **Regression**: the absolute error scaled into [0, 1]: `min(1, |ŷ - y| / scale)`. The scale is
      the policy's `scale` option when given; otherwise the running range of the labels seen so far
      (`max - min`, this label included), kept in the state as a `LabelRange`. With no range yet
      (one distinct label so far) no scale exists, so the loss is 0/1: 0 for an exact answer, else 1.
      For list outputs the error is the mean absolute error over the elements. A non-finite output
      (NaN, ±inf) costs the full loss 1."""

    task: Task = "classification"
    scale: float | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, not {self.task!r}")
        if self.scale is not None and not (self.scale > 0 and math.isfinite(self.scale)):
            raise ValueError(f"scale must be a positive number, not {self.scale!r}")

    def scale_for(self, labels: LabelRange) -> float:
        return self.scale if self.scale is not None else labels.span

    def __call__(self, output: Any, label: Any, labels: LabelRange) -> float:
        if self.task == "classification":
            return zero_one_loss(output, label)
        return scaled_absolute_loss(output, label, self.scale_for(labels))
