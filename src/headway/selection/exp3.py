"""Exp3: one model per query, learned from feedback on that model alone (docs/selection.md)."""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from headway.selection.decision import own_confidence, unwrap
from headway.selection.policy import PolicyState, Selection, WeightedPolicy, draw, shares


class Exp3Policy(WeightedPolicy):
    """Exp3 over the linked models.

    Select: model i is queried with probability p_i = w_i / Σ_j w_j (the sum over the models ready
    now). Observe: only the chosen model's loss L ∈ [0, 1] is known, so its importance-weighted
    estimate L / p_i (unbiased: it is observed with probability p_i) updates the chosen weight,

        w_i ← w_i · exp(-η · L / p_i),          η = 0.01 by default (Clipper's),

    using the probability with which it was actually chosen (kept in the `Selection`). Weights start
    at 1; a model added later starts at the mean weight. If the chosen model did not answer in time
    nothing is learned (there is no loss to score).

    Combine: the chosen model's output as it is. Confidence is the model's own: what it reports with
    `Answer(output, confidence)`, or the top entry of a class-probability vector it answers, else
    1.0. (The bandit's p_i is not used: it measures how sure the policy is that i is the best model,
    not how sure i is of this answer.)"""

    name = "exp3"

    def probabilities(
        self, state: PolicyState, ready: Collection[str] | None = None
    ) -> dict[str, float]:
        """p_i for each model that may be chosen now."""
        candidates = [m for m in state.log_weights if ready is None or m in ready]
        return shares(state.log_weights, candidates)

    def select(
        self, state: PolicyState, rng: random.Random, *, ready: Collection[str] | None = None
    ) -> Selection:
        self._check(state)
        probabilities = self.probabilities(state, ready)
        if not probabilities:
            return Selection(())
        chosen = draw(probabilities, rng)
        return Selection((chosen,), {chosen: probabilities[chosen]})

    def _merge(
        self, state: PolicyState, arrived: dict[str, Any], queried: Sequence[str]
    ) -> tuple[Any, float]:
        # Exp3 queries one model; if a caller queried several, the heaviest that answered speaks.
        model = max(arrived, key=lambda m: state.log_weights.get(m, float("-inf")))
        return unwrap(arrived[model]), own_confidence(arrived[model])

    def observe(
        self, state: PolicyState, label: Any, answers: Mapping[str, Any], selection: Selection
    ) -> dict[str, float]:
        self._check(state)
        if not selection.models:
            return {}
        chosen = selection.models[0]
        losses = self._losses(state, label, answers, [chosen])
        probability = selection.probabilities.get(chosen, 0.0)
        if chosen in losses and chosen in state.log_weights and probability > 0:
            self._penalise(state, {chosen: self.eta * losses[chosen] / probability})
        return losses
