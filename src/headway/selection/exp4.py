"""Exp4: query every model, answer with their weighted combination, learn from all of them
(docs/selection.md).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from headway.selection.decision import unwrap
from headway.selection.losses import absolute_error, class_of, numbers, plain
from headway.selection.policy import PolicyState, Selection, WeightedPolicy, shares


class Exp4Policy(WeightedPolicy):
    """Exp4 over the linked models.

    Select: every linked model that is ready. Combine, over the models that answered in time:
    - classification: a weighted vote on the predicted class; the answer is the output of the
      heaviest model that voted for the winning class (so it keeps the models' own form, e.g. a
      probability vector). Ties go to the class whose first voter comes first in query order.
    - regression: the weighted mean Σ w_i·ŷ_i / Σ w_i (element-wise for list outputs).

    Confidence is the weight share that agrees with the answer: the weight of the answering models
    that agree, over the weight of *all queried* models, so a model that missed the deadline counts
    as not agreeing. For classification, agreeing means voting for the winning class; for regression,
    being within `tolerance` (default 0.1) of the answer in loss terms, |ŷ_i - ŷ| ≤ tolerance·scale,
    with the loss's scale (the `scale` option, else the running label range; before any label, |ŷ|).

    Observe: every model that answered is scored against the label and updated with its own loss,

        w_i ← w_i · exp(-η · L_i),          η = 0.01 by default.

    This is Hedge (exponential weights with full information), not Exp3's importance-weighted
    update: every model's answer is observed with probability 1, so the unbiased loss estimate is
    L_i / 1. Dividing by the weight share p_i, as Clipper's code did, would over-punish the models
    with little weight, a feedback loop that drives them to the floor on a single mistake. Models that
    did not answer are not updated: lateness is not inaccuracy."""

    name = "exp4"

    def __init__(self, models: Iterable[str], *, tolerance: float = 0.1, **options: Any) -> None:
        super().__init__(models, **options)
        if not tolerance >= 0:
            raise ValueError(f"tolerance must be at least 0, not {tolerance!r}")
        self.tolerance = float(tolerance)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "tolerance": self.tolerance}

    def select(
        self, state: PolicyState, rng: random.Random, *, ready: Collection[str] | None = None
    ) -> Selection:
        self._check(state)
        models = tuple(m for m in state.log_weights if ready is None or m in ready)
        return Selection(models, dict.fromkeys(models, 1.0))

    def _merge(
        self, state: PolicyState, arrived: dict[str, Any], queried: Sequence[str]
    ) -> tuple[Any, float]:
        weight = shares(state.log_weights, queried)  # sums to 1 over the queried models
        if self.loss.task == "classification":
            return self._vote(arrived, weight)
        return self._mean(state, arrived, weight)

    def _vote(self, arrived: dict[str, Any], weight: dict[str, float]) -> tuple[Any, float]:
        tally: dict[Any, float] = {}
        speaker: dict[Any, str] = {}
        for model, answer in arrived.items():
            key = class_of(unwrap(answer))
            tally[key] = tally.get(key, 0.0) + weight.get(model, 0.0)
            if key not in speaker or weight.get(model, 0.0) > weight.get(speaker[key], 0.0):
                speaker[key] = model
        winner = max(tally, key=tally.__getitem__)
        return unwrap(arrived[speaker[winner]]), tally[winner]

    def _mean(
        self, state: PolicyState, arrived: dict[str, Any], weight: dict[str, float]
    ) -> tuple[Any, float]:
        values: dict[str, list[float]] = {}
        for model, answer in arrived.items():
            try:
                values[model] = numbers(unwrap(answer))
            except ValueError:
                continue  # a non-numeric answer takes no part and does not agree
        if not values:
            raise ValueError(f"no numeric answer to average among {sorted(arrived)}")
        size = len(next(iter(values.values())))
        values = {m: v for m, v in values.items() if len(v) == size}
        total = sum(weight.get(m, 0.0) for m in values)
        if total > 0:
            mean = [
                sum(weight.get(m, 0.0) * v[k] for m, v in values.items()) / total
                for k in range(size)
            ]
        else:
            mean = [sum(v[k] for v in values.values()) / len(values) for k in range(size)]
        scale = self.loss.scale_for(state.labels) or sum(abs(x) for x in mean) / size
        agreeing = sum(
            weight.get(m, 0.0)
            for m, v in values.items()
            if absolute_error(v, mean) <= self.tolerance * scale
        )
        listed = isinstance(plain(unwrap(arrived[next(iter(values))])), list)
        return (mean if listed else mean[0]), agreeing

    def observe(
        self, state: PolicyState, label: Any, answers: Mapping[str, Any], selection: Selection
    ) -> dict[str, float]:
        self._check(state)
        losses = self._losses(state, label, answers, selection.models)
        penalties = {m: self.eta * loss for m, loss in losses.items() if m in state.log_weights}
        if penalties:
            self._penalise(state, penalties)
        return losses
