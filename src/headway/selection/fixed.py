"""Fixed: one model, or a weighted traffic split between versions (a canary); learns nothing."""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from headway.selection.decision import own_confidence, unwrap
from headway.selection.policy import Policy, PolicyState, Selection, draw


class FixedPolicy(Policy):
    """Options: `split` (model -> traffic weight) or `active` (one model; default the first).

    Each query goes to one model, drawn with its share of the traffic among the models that are
    ready. The split lives in the state, so it changes at run time and persists with it:
    `set_active(state, "clf:1")` sends everything to one version (a rollback, or a full rollout),
    `set_split(state, {"clf:1": 0.9, "clf:2": 0.1})` starts a canary. A model linked later gets no
    traffic until the split names it. If no model with a share is ready, nothing is queried and the
    default output says "no model ready": a versioned app never silently falls back to a version
    it was not told to serve.

    Combine and confidence are Exp3's: the model's output as is, with its own confidence (1.0 when
    it reports none). Feedback is scored (for statistics) but changes nothing."""

    name = "fixed"
    learns = False

    def __init__(
        self,
        models: Iterable[str],
        *,
        split: Mapping[str, float] | None = None,
        active: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(models, **options)
        if split is not None and active is not None:
            raise ValueError("give either a traffic split or an active model, not both")
        if split is None:
            active = active if active is not None else (self.models[0] if self.models else None)
            split = {active: 1.0} if active is not None else {}
        self.split = _normalised(self.models, split) if split or self.models else {}

    def config(self) -> dict[str, Any]:
        # only linked models: a model unlinked at run time must not make the config invalid
        split = {m: s for m, s in self.split.items() if s > 0 and m in self.models}
        return {**super().config(), "split": split or None}

    def initial_state(self) -> PolicyState:
        return PolicyState(self.name, split={m: self.split.get(m, 0.0) for m in self.models})

    def set_split(self, state: PolicyState, split: Mapping[str, float]) -> None:
        """Route traffic in proportion to `split` (models it does not name get none)."""
        self._check(state)
        state.split = _normalised(state.models, split)

    def set_active(self, state: PolicyState, model: str) -> None:
        """Send all traffic to one model: a rollback, or a full rollout."""
        self.set_split(state, {model: 1.0})

    def select(
        self, state: PolicyState, rng: random.Random, *, ready: Collection[str] | None = None
    ) -> Selection:
        self._check(state)
        candidates = {
            m: s for m, s in state.split.items() if s > 0 and (ready is None or m in ready)
        }
        if not candidates:
            return Selection(())
        chosen = draw(candidates, rng)
        return Selection((chosen,), {chosen: candidates[chosen] / sum(candidates.values())})

    def _merge(
        self, state: PolicyState, arrived: dict[str, Any], queried: Sequence[str]
    ) -> tuple[Any, float]:
        answer = next(iter(arrived.values()))
        return unwrap(answer), own_confidence(answer)

    def observe(
        self, state: PolicyState, label: Any, answers: Mapping[str, Any], selection: Selection
    ) -> dict[str, float]:
        self._check(state)
        return self._losses(state, label, answers, selection.models)

    def add_model(self, state: PolicyState, model: str) -> None:
        self._check(state)
        state.split.setdefault(model, 0.0)

    def remove_model(self, state: PolicyState, model: str) -> None:
        """Unlink a model; the others keep their proportions (none left: no traffic at all)."""
        self._check(state)
        if state.split.pop(model, None) is None:
            return
        total = sum(state.split.values())
        if total > 0:
            state.split = {m: s / total for m, s in state.split.items()}

    def weights(self, state: PolicyState) -> dict[str, float]:
        return dict(state.split)


def _normalised(models: Sequence[str], split: Mapping[str, float]) -> dict[str, float]:
    unknown = sorted(set(split) - set(models))
    if unknown:
        raise ValueError(f"the split names models that are not linked: {', '.join(unknown)}")
    if any(not (s >= 0 and math.isfinite(s)) for s in split.values()):
        raise ValueError(f"traffic weights must be finite and non-negative: {dict(split)}")
    total = sum(split.values())
    if total <= 0:
        raise ValueError("a traffic split must give some model a positive weight")
    return {m: split.get(m, 0.0) / total for m in models}
