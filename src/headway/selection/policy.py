"""The selection policy interface (Clipper's select / combine / observe) and its state.

A `Policy` is configuration and logic only; everything it learns lives in a `PolicyState`, one
per application (and per user when the application personalises), which turns into a JSON-able
dict and back. Randomness comes from an injected `random.Random`, never the global generator.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from headway.selection.decision import Decision, straggler_combine, unwrap
from headway.selection.losses import LabelRange, LossRule, Task

STATE_FORMAT = 1


@dataclass(frozen=True)
class Selection:
    """The models chosen for one query, each with the probability that it was chosen.

    Exp3 needs that probability at feedback time (its loss estimate is divided by it), so the
    caller keeps the selection until the feedback for the query arrives. `app_divisors` is set
    when a user's own state chose (personalisation): per chosen model, what the app-wide state's
    Exp3 update divides the loss by instead (`Exp3Policy.app_divisors`).
    """

    models: tuple[str, ...]
    probabilities: dict[str, float] = field(default_factory=dict)
    app_divisors: dict[str, float] = field(default_factory=dict)

    def for_app(self) -> Selection:
        """The selection as the app-wide state learns from it: as it is when the app-wide state
        chose, else with `app_divisors` in place of the user's probabilities."""
        if not self.app_divisors:
            return self
        return Selection(self.models, dict(self.app_divisors))

    def only(self, models: Collection[str]) -> Selection:
        """The selection restricted to `models` (those still linked)."""
        return Selection(
            tuple(m for m in self.models if m in models),
            {m: p for m, p in self.probabilities.items() if m in models},
            {m: d for m, d in self.app_divisors.items() if m in models},
        )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "models": list(self.models),
            "probabilities": dict(self.probabilities),
        }
        if self.app_divisors:
            data["app_divisors"] = dict(self.app_divisors)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Selection:
        models = tuple(str(model) for model in data["models"])
        probabilities = {str(m): float(p) for m, p in data.get("probabilities", {}).items()}
        divisors = {str(m): float(d) for m, d in data.get("app_divisors", {}).items()}
        return cls(models, probabilities, divisors)


@dataclass
class PolicyState:
    """What a policy has learned for one application or user.

    `log_weights` (exp3, exp4): model -> natural log of its weight, the largest being 0.
    `split` (fixed): model -> share of the traffic, summing to 1 (0 for a model given none).
    `labels`: the range of regression labels seen, the default regression loss scale.
    `updates`: feedback events applied.
    """

    policy: str
    log_weights: dict[str, float] = field(default_factory=dict)
    split: dict[str, float] = field(default_factory=dict)
    labels: LabelRange = field(default_factory=LabelRange)
    updates: int = 0

    @property
    def models(self) -> list[str]:
        return list(self.log_weights or self.split)

    def copy(self) -> PolicyState:
        return PolicyState.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "policy": self.policy,
            "log_weights": dict(self.log_weights),
            "split": dict(self.split),
            "labels": self.labels.to_dict(),
            "updates": self.updates,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyState:
        if data.get("format", STATE_FORMAT) != STATE_FORMAT:
            raise ValueError(f"unknown selection state format {data.get('format')!r}")
        log_weights = {str(m): float(w) for m, w in data.get("log_weights", {}).items()}
        split = {str(m): float(s) for m, s in data.get("split", {}).items()}
        if not all(math.isfinite(w) for w in log_weights.values()):
            raise ValueError("selection state has a non-finite log weight")
        if any(not (s >= 0 and math.isfinite(s)) for s in split.values()):
            raise ValueError("selection state has a negative or non-finite traffic share")
        return cls(
            policy=str(data["policy"]),
            log_weights=log_weights,
            split=split,
            labels=LabelRange.from_dict(data.get("labels", {})),
            updates=int(data.get("updates", 0)),
        )


# -- weights in log space ------------------------------------------------------------------------


def shares(
    log_weights: Mapping[str, float], models: Iterable[str] | None = None
) -> dict[str, float]:
    """Each model's weight divided by the total over `models` (default: all), computed stably."""
    chosen = [m for m in (log_weights if models is None else models) if m in log_weights]
    if not chosen:
        return {}
    top = max(log_weights[m] for m in chosen)
    scaled = {m: math.exp(log_weights[m] - top) for m in chosen}
    total = sum(scaled.values())
    return {m: w / total for m, w in scaled.items()}


def mean_log_weight(log_weights: Mapping[str, float]) -> float:
    """log of the arithmetic mean of the weights (0 when there are none)."""
    if not log_weights:
        return 0.0
    top = max(log_weights.values())
    return top + math.log(sum(math.exp(w - top) for w in log_weights.values()) / len(log_weights))


def renormalise(log_weights: dict[str, float], min_weight: float) -> None:
    """Shift so the largest log weight is 0; raise any below log(min_weight) to it. In place."""
    if not log_weights:
        return
    top = max(log_weights.values())
    floor = math.log(min_weight)
    for model, weight in log_weights.items():
        log_weights[model] = max(weight - top, floor)


def draw(probabilities: Mapping[str, float], rng: random.Random) -> str:
    """One model, drawn with the given probabilities (in their mapping order)."""
    point = rng.random() * sum(probabilities.values())
    last = ""
    for model, probability in probabilities.items():
        last = model
        point -= probability
        if point < 0:
            return model
    return last


# -- the interface ---------------------------------------------------------------------------------


class Policy(ABC):
    """Chooses models for a query, combines their answers and learns from feedback.

    Options common to every policy:
      models          the models linked to the application, in a fixed order
      task            "classification" (0/1 loss, weighted vote) or "regression"
      scale           regression loss scale; None = the running range of labels seen
      default_output  answered when no model can answer well enough in time
      threshold       confidence below which the default output is answered instead (0 = never)
    """

    name: ClassVar[str]
    #: whether feedback changes what the policy selects (false: personalising is pointless)
    learns: ClassVar[bool] = True

    def __init__(
        self,
        models: Iterable[str],
        *,
        task: Task = "classification",
        scale: float | None = None,
        default_output: Any = None,
        threshold: float = 0.0,
    ) -> None:
        listed = [str(model) for model in models]
        if len(set(listed)) != len(listed):
            raise ValueError(f"a model is listed twice in {listed}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be within [0, 1], not {threshold!r}")
        self.models = listed
        self.loss = LossRule(task, scale)
        self.default_output = default_output
        self.threshold = float(threshold)

    def config(self) -> dict[str, Any]:
        """Everything `make_policy(**config)` needs to build this policy again."""
        return {
            "name": self.name,
            "models": list(self.models),
            "task": self.loss.task,
            "scale": self.loss.scale,
            "default_output": self.default_output,
            "threshold": self.threshold,
        }

    @abstractmethod
    def initial_state(self) -> PolicyState:
        """The state of an application that has had no feedback."""

    @abstractmethod
    def select(
        self, state: PolicyState, rng: random.Random, *, ready: Collection[str] | None = None
    ) -> Selection:
        """The models to query; only those in `ready` when it is given (empty: none ready)."""

    @abstractmethod
    def _merge(
        self, state: PolicyState, arrived: dict[str, Any], queried: Sequence[str]
    ) -> tuple[Any, float]:
        """(output, confidence) from the answers that arrived (at least one)."""

    @abstractmethod
    def observe(
        self, state: PolicyState, label: Any, answers: Mapping[str, Any], selection: Selection
    ) -> dict[str, float]:
        """Learn from the true label of a query; returns the loss of each model judged."""

    @abstractmethod
    def add_model(self, state: PolicyState, model: str) -> None:
        """Link a model to the state (no-op when it is already there)."""

    @abstractmethod
    def remove_model(self, state: PolicyState, model: str) -> None:
        """Unlink a model from the state (no-op when it is not there)."""

    @abstractmethod
    def weights(self, state: PolicyState) -> dict[str, float]:
        """Each model's share of the total weight (fixed: of the traffic)."""

    def combine(
        self,
        state: PolicyState,
        answers: Mapping[str, Any],
        queried: Selection | Sequence[str],
    ) -> Decision:
        """The decision at the deadline from whichever queried models have answered."""
        models = tuple(queried.models if isinstance(queried, Selection) else queried)
        return straggler_combine(
            models,
            answers,
            lambda arrived: self._merge(state, arrived, models),
            default_output=self.default_output,
            threshold=self.threshold,
        )

    def drawn_by_user(
        self, own: PolicyState, selection: Selection, ready: Collection[str] | None = None
    ) -> Selection:
        """`selection`, drawn from a user's own state `own`, made ready to teach the app-wide state
        too. Only Exp3 needs anything: the others learn the same from any selection."""
        return selection

    def reconcile(self, state: PolicyState) -> None:
        """Make a (perhaps restored) state hold exactly this policy's models."""
        self._check(state)
        for model in state.models:
            if model not in self.models:
                self.remove_model(state, model)
        for model in self.models:
            self.add_model(state, model)

    def _check(self, state: PolicyState) -> None:
        if state.policy != self.name:
            raise ValueError(f"a {state.policy!r} state given to the {self.name!r} policy")

    def _losses(
        self, state: PolicyState, label: Any, answers: Mapping[str, Any], models: Iterable[str]
    ) -> dict[str, float]:
        """The loss of each of `models` that answered; widens the label range first."""
        if self.loss.task == "regression":
            state.labels.update(label)
        return {
            model: self.loss(unwrap(answers[model]), label, state.labels)
            for model in models
            if model in answers
        }


class WeightedPolicy(Policy):
    """A policy that learns one multiplicative weight per model (exp3, exp4).

        Extra options:
          eta         learning rate η (default 0.01, Clipper's)
          min_weight  the smallest weight relative to the largest (default 1e-3)

    Weights are kept in log space and renormalised after every update so that the largest is
    exactly 1 (log 0) and none falls below `min_weight` times the largest: no weight underflows to
    0 however many updates it gets, and a model that was bad for a long time can still come back
    within a bounded number of good answers."""

    def __init__(
        self, models: Iterable[str], *, eta: float = 0.01, min_weight: float = 1e-3, **options: Any
    ) -> None:
        super().__init__(models, **options)
        if not (eta > 0 and math.isfinite(eta)):
            raise ValueError(f"eta must be a positive number, not {eta!r}")
        if not 0.0 < min_weight < 1.0:
            raise ValueError(f"min_weight must be within (0, 1), not {min_weight!r}")
        self.eta = float(eta)
        self.min_weight = float(min_weight)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "eta": self.eta, "min_weight": self.min_weight}

    def initial_state(self) -> PolicyState:
        return PolicyState(self.name, log_weights=dict.fromkeys(self.models, 0.0))

    def add_model(self, state: PolicyState, model: str) -> None:
        """A new model starts at the mean weight of the models already there."""
        self._check(state)
        if model not in state.log_weights:
            state.log_weights[model] = mean_log_weight(state.log_weights)
            renormalise(state.log_weights, self.min_weight)

    def remove_model(self, state: PolicyState, model: str) -> None:
        self._check(state)
        if state.log_weights.pop(model, None) is not None:
            renormalise(state.log_weights, self.min_weight)

    def weights(self, state: PolicyState) -> dict[str, float]:
        return shares(state.log_weights)

    def _penalise(self, state: PolicyState, penalties: Mapping[str, float]) -> None:
        """w_i ← w_i·exp(-penalty_i), in log space, then renormalise."""
        for model, penalty in penalties.items():
            state.log_weights[model] -= penalty
        renormalise(state.log_weights, self.min_weight)
        state.updates += 1
