"""Exp3: one model per query, learned from feedback on that model alone (docs/selection.md)."""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
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

    An importance weight is valid only for the state that drew: with personalisation, a query
    drawn from a user's own state (probabilities q) teaches the app-wide state as an exploration
    draw instead, with the estimate L·K·min_j q_j / q_i, never L / q_i (`app_divisors`).

    Combine: the chosen model's output as it is. Confidence is the model's own: what it reports
    with `ModelAnswer(output, confidence)`, or the top entry of a class-probability vector it
    answers, else 1.0. (The bandit's p_i is not used: it measures how sure the policy is that i
    is the best model, not how sure i is of this answer.)"""

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

    def drawn_by_user(
        self, own: PolicyState, selection: Selection, ready: Collection[str] | None = None
    ) -> Selection:
        return replace(selection, app_divisors=self.app_divisors(own, selection.models, ready))

    def app_divisors(
        self, own: PolicyState, chosen: Collection[str], ready: Collection[str] | None = None
    ) -> dict[str, float]:
        """What the app-wide update divides a loss by when the user's own state `own` drew it.

        Dividing by the user's q_i would be unbiased, but a user who has learned to avoid a model
        draws it with q_i near the floor, and one such draw would move the app-wide weights by
        η/q_i (to the floor). Instead the draw counts as exploration: keeping it with probability
        min_j q_j / q_i leaves every model kept with the same probability min_j q_j, i.e. a uniform
        draw over the K candidates, whose unbiased estimate is L·K. In expectation that is
        L·K·min_j q_j / q_i, the same fraction K·min_j q_j of every model's loss in this query, and
        at most L·K (the step of an app-wide draw at p_i = 1/K): the divisor is q_i/(K·min_j q_j).
        It does not depend on the app-wide weights, so users who agree with them do not count
        more than users who do not (no lock-in)."""
        probabilities = self.probabilities(own, ready)
        if not probabilities:
            return {}
        uniform_share = len(probabilities) * min(probabilities.values())
        return {m: probabilities[m] / uniform_share for m in chosen if m in probabilities}

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
