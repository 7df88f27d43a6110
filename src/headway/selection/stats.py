"""Statistics of one application's model selection, as plain records.

Per model: its weight share (fixed: traffic share), how often it was selected (chosen by Exp3 or
fixed, included by Exp4) as a count and a share of all selections, and its accuracy over the
last `window` feedback events that judged it (1 - mean loss: plain accuracy for classifiers,
1 - mean scaled error for regressors). Per application: decisions, default outputs, their rate
and their reasons (`no_model_ready`, `no_answer`, `low_confidence`). Counters are totals since
the statistics were created; only the accuracy is windowed. `SelectionCounters` counts as the
events come; the frozen `SelectionStatistics` record is what it reads as.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from headway.selection.decision import REASONS, Decision
from headway.selection.policy import Selection


@dataclass(frozen=True)
class ModelSelectionStatistics:
    model: str
    weight: float
    selected: int
    selection_share: float
    feedback: int
    accuracy: float | None


@dataclass(frozen=True)
class SelectionStatistics:
    selections: int
    decisions: int
    defaults: int
    default_rate: float
    default_reasons: dict[str, int]
    feedback: int
    models: tuple[ModelSelectionStatistics, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SelectionCounters:
    """Counters fed by the registry on every selection, decision and feedback event."""

    def __init__(self, window: int = 1000) -> None:
        if window < 1:
            raise ValueError(f"the accuracy window must hold at least one event, not {window}")
        self.window = window
        self.selections = 0
        self.decisions = 0
        self.defaults = 0
        self.default_reasons: dict[str, int] = dict.fromkeys(REASONS, 0)
        self.feedback = 0
        self.selected: dict[str, int] = {}
        self.losses: dict[str, deque[float]] = {}

    def record_selection(self, selection: Selection) -> None:
        self.selections += 1
        for model in selection.models:
            self.selected[model] = self.selected.get(model, 0) + 1

    def record_decision(self, decision: Decision) -> None:
        self.decisions += 1
        if decision.default:
            self.defaults += 1
            reason = decision.reason or "other"
            self.default_reasons[reason] = self.default_reasons.get(reason, 0) + 1

    def record_feedback(self, losses: Mapping[str, float]) -> None:
        self.feedback += 1
        for model, loss in losses.items():
            self._window(model).append(loss)

    def forget(self, model: str) -> None:
        self.selected.pop(model, None)
        self.losses.pop(model, None)

    def statistics(self, weights: Mapping[str, float]) -> SelectionStatistics:
        """A snapshot; `weights` are the current weight shares of the linked models."""
        models = []
        for model, weight in weights.items():
            losses = self.losses.get(model, ())
            selected = self.selected.get(model, 0)
            models.append(
                ModelSelectionStatistics(
                    model=model,
                    weight=weight,
                    selected=selected,
                    selection_share=selected / self.selections if self.selections else 0.0,
                    feedback=len(losses),
                    accuracy=1.0 - sum(losses) / len(losses) if losses else None,
                )
            )
        return SelectionStatistics(
            selections=self.selections,
            decisions=self.decisions,
            defaults=self.defaults,
            default_rate=self.defaults / self.decisions if self.decisions else 0.0,
            default_reasons=dict(self.default_reasons),
            feedback=self.feedback,
            models=tuple(models),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "selections": self.selections,
            "decisions": self.decisions,
            "defaults": self.defaults,
            "default_reasons": dict(self.default_reasons),
            "feedback": self.feedback,
            "selected": dict(self.selected),
            "losses": {model: list(losses) for model, losses in self.losses.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SelectionCounters:
        stats = cls(int(data.get("window", 1000)))
        stats.selections = int(data.get("selections", 0))
        stats.decisions = int(data.get("decisions", 0))
        stats.defaults = int(data.get("defaults", 0))
        stats.default_reasons.update(
            {str(k): int(v) for k, v in data.get("default_reasons", {}).items()}
        )
        stats.feedback = int(data.get("feedback", 0))
        stats.selected = {str(k): int(v) for k, v in data.get("selected", {}).items()}
        for model, losses in data.get("losses", {}).items():
            stats._window(str(model)).extend(float(loss) for loss in losses)
        return stats

    def _window(self, model: str) -> deque[float]:
        if model not in self.losses:
            self.losses[model] = deque(maxlen=self.window)
        return self.losses[model]
