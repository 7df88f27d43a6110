"""Model selection (Clipper's select / combine / observe): fixed, Exp3 and Exp4 policies.

Pure logic: no I/O, no clock, no global randomness. See `docs/selection.md`.
"""

from headway.selection.decision import (
    LOW_CONFIDENCE,
    NO_ANSWER,
    NO_MODEL_READY,
    Decision,
    ModelAnswer,
    straggler_combine,
)
from headway.selection.exp3 import Exp3Policy
from headway.selection.exp4 import Exp4Policy
from headway.selection.fixed import FixedPolicy
from headway.selection.kinds import make_policy
from headway.selection.losses import LabelRange, LossRule, scaled_absolute_loss, zero_one_loss
from headway.selection.policy import Policy, PolicyState, Selection
from headway.selection.states import StateRegistry
from headway.selection.stats import ModelSelectionStatistics, SelectionCounters, SelectionStatistics

__all__ = [
    "LOW_CONFIDENCE",
    "NO_ANSWER",
    "NO_MODEL_READY",
    "Decision",
    "Exp3Policy",
    "Exp4Policy",
    "FixedPolicy",
    "LabelRange",
    "LossRule",
    "ModelAnswer",
    "ModelSelectionStatistics",
    "Policy",
    "PolicyState",
    "Selection",
    "SelectionCounters",
    "SelectionStatistics",
    "StateRegistry",
    "make_policy",
    "scaled_absolute_loss",
    "straggler_combine",
    "zero_one_loss",
]
