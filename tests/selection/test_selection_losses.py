"""Losses in [0, 1]: 0/1 for classes, absolute error scaled by the running label range."""

from __future__ import annotations

import numpy as np
import pytest

from headway.selection import LabelRange, LossRule, scaled_absolute_loss, zero_one_loss
from headway.selection.losses import class_of


def test_zero_one_loss_on_classes_of_every_form() -> None:
    assert zero_one_loss("cat", "cat") == 0.0
    assert zero_one_loss("cat", "dog") == 1.0
    assert zero_one_loss(3, 3) == 0.0
    assert zero_one_loss([0.1, 0.7, 0.2], 1) == 0.0  # a probability vector predicts its argmax
    assert zero_one_loss(np.array([0.9, 0.1]), 1) == 1.0
    assert zero_one_loss(np.int64(4), 4) == 0.0
    assert zero_one_loss([1, 2], [1, 2]) == 0.0  # a list of ints is a class of its own
    assert class_of({"b": [1, 2], "a": 3}) == (("a", 3), ("b", (1, 2)))


def test_scaled_absolute_loss() -> None:
    assert scaled_absolute_loss(12.0, 10.0, scale=8.0) == 0.25  # |12 - 10| / 8
    assert scaled_absolute_loss(30.0, 10.0, scale=8.0) == 1.0  # capped at 1
    assert scaled_absolute_loss([1.0, 3.0], [0.0, 0.0], scale=4.0) == 0.5  # mean error 2 / 4
    assert scaled_absolute_loss(float("nan"), 1.0, scale=4.0) == 1.0
    assert scaled_absolute_loss("junk", 1.0, scale=4.0) == 1.0
    # no scale yet: 0/1 on exact agreement
    assert scaled_absolute_loss(2.0, 2.0, scale=0.0) == 0.0
    assert scaled_absolute_loss(2.5, 2.0, scale=0.0) == 1.0


def test_regression_scale_defaults_to_the_running_label_range() -> None:
    rule = LossRule("regression")
    labels = LabelRange()
    labels.update(0.0)
    assert labels.span == 0.0
    assert rule(0.5, 0.0, labels) == 1.0  # no range yet
    labels.update(50.0)
    assert rule(45.0, 50.0, labels) == pytest.approx(0.1)  # |45 - 50| / (50 - 0)
    assert LossRule("regression", scale=10.0)(45.0, 50.0, labels) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="finite"):
        labels.update(float("inf"))
    with pytest.raises(ValueError, match="task"):
        LossRule("ranking")  # type: ignore[arg-type]
