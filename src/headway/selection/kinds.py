"""The selection policies by name, as applications name them in their configuration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from headway.selection.exp3 import Exp3Policy
from headway.selection.exp4 import Exp4Policy
from headway.selection.fixed import FixedPolicy
from headway.selection.policy import Policy

KINDS: dict[str, type[Policy]] = {
    "fixed": FixedPolicy,
    "exp3": Exp3Policy,
    "exp4": Exp4Policy,
}


def make_policy(name: str, models: Iterable[str], **options: Any) -> Policy:
    """A policy by name: "fixed", "exp3" or "exp4", with that policy's options."""
    try:
        kind = KINDS[name]
    except KeyError:
        raise ValueError(
            f"unknown selection policy {name!r}; expected one of {', '.join(KINDS)}"
        ) from None
    return kind(models, **options)
