"""One application's model selection: its policy, app-wide and per-user states, statistics.

With `personalize`, each user learns a state of their own, started from what the application
has learned about all users; `StateRegistry` says how the two keep learning.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from typing import Any

from headway.selection.decision import Decision
from headway.selection.fixed import FixedPolicy
from headway.selection.kinds import make_policy
from headway.selection.policy import Policy, PolicyState, Selection
from headway.selection.stats import SelectionCounters, SelectionStatistics

REGISTRY_FORMAT = 1


class StateRegistry:
    """Per-app and per-user selection state for one application, purely in memory.

    Without `personalize` every query and every feedback event uses the app-wide state. With it:

    - a user never seen is served from the app-wide state; their own state is made at their first
      feedback as a *copy of the app-wide state* (not uniform weights): a new user starts from
      what the application has learned about all users, and moves away only as far as their own
      feedback says;
    - feedback updates the user's state *and* the app-wide state, so the starting point for new
      users keeps learning. An Exp3 importance weight holds only for the state that drew the
      model: the user's state divides the loss by the user's probability q_i; the app-wide state
      counts the user's draw as exploration, L·K·min_j q_j / q_i (`Exp3Policy.app_divisors`), a
      step no larger than its own draws make, which follows the model best across users.

    A policy that does not learn (fixed) ignores `personalize`: its traffic split is the app's.
    `to_dict()` is JSON-able (the store persists it); `from_dict()` rebuilds the policy from its
    recorded configuration and reconciles every state with its models."""

    def __init__(
        self,
        policy: Policy,
        *,
        personalize: bool = False,
        window: int = 1000,
        app_state: PolicyState | None = None,
    ) -> None:
        self.policy = policy
        self.personalize = personalize
        self.app = app_state if app_state is not None else policy.initial_state()
        policy.reconcile(self.app)
        self.users: dict[str, PolicyState] = {}
        self.stats = SelectionCounters(window)

    @property
    def personalizing(self) -> bool:
        return self.personalize and self.policy.learns

    def state_for(self, user: str | None = None) -> PolicyState:
        """The state that serves `user`: their own if they have one, else the app-wide one."""
        if self.personalizing and user is not None:
            return self.users.get(user, self.app)
        return self.app

    # -- one query -------------------------------------------------------------------------------

    def select(
        self,
        rng: random.Random,
        *,
        user: str | None = None,
        ready: Collection[str] | None = None,
    ) -> Selection:
        selection = self.draw(rng, user=user, ready=ready)
        self.stats.record_selection(selection)
        return selection

    def draw(
        self,
        rng: random.Random,
        *,
        user: str | None = None,
        ready: Collection[str] | None = None,
    ) -> Selection:
        """The models to ask, not counted in the statistics (`select` counts them)."""
        state = self.state_for(user)
        selection = self.policy.select(state, rng, ready=ready)
        if state is not self.app:
            selection = self.policy.drawn_by_user(state, selection, ready)
        return selection

    def combine(
        self, answers: Mapping[str, Any], selection: Selection, *, user: str | None = None
    ) -> Decision:
        decision = self.policy.combine(self.state_for(user), answers, selection)
        self.stats.record_decision(decision)
        return decision

    def observe(
        self,
        label: Any,
        answers: Mapping[str, Any],
        selection: Selection,
        *,
        user: str | None = None,
    ) -> dict[str, float]:
        """Learn from a query's true label; returns the loss of each model judged."""
        if self.personalizing and user is not None:
            state = self.users.get(user)
            if state is None:
                state = self.users[user] = self.app.copy()
            losses = self.policy.observe(state, label, answers, selection)
            self.policy.observe(self.app, label, answers, selection.for_app())
        else:
            losses = self.policy.observe(self.app, label, answers, selection)
        self.stats.record_feedback(losses)
        return losses

    # -- changes at run time ---------------------------------------------------------------------

    def add_model(self, model: str) -> None:
        """Link a model; in each state it starts at that state's mean weight (fixed: no traffic)."""
        if model not in self.policy.models:
            self.policy.models.append(model)
        for state in self._states():
            self.policy.add_model(state, model)

    def remove_model(self, model: str) -> None:
        if model in self.policy.models:
            self.policy.models.remove(model)
        for state in self._states():
            self.policy.remove_model(state, model)
        self.stats.forget(model)

    def set_split(self, split: Mapping[str, float]) -> None:
        """Change a fixed policy's traffic split (a canary)."""
        self._fixed().set_split(self.app, split)

    def set_active(self, model: str) -> None:
        """Send a fixed policy's traffic to one model (a rollback or a full rollout)."""
        self._fixed().set_active(self.app, model)

    # -- reporting and persistence ---------------------------------------------------------------

    def statistics(self) -> SelectionStatistics:
        return self.stats.statistics(self.policy.weights(self.app))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": REGISTRY_FORMAT,
            "policy": self.policy.config(),
            "personalize": self.personalize,
            "app": self.app.to_dict(),
            "users": {user: state.to_dict() for user, state in self.users.items()},
            "stats": self.stats.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StateRegistry:
        if data.get("format", REGISTRY_FORMAT) != REGISTRY_FORMAT:
            raise ValueError(f"unknown selection registry format {data.get('format')!r}")
        policy = make_policy(**data["policy"])
        stats = SelectionCounters.from_dict(data.get("stats", {}))
        registry = cls(
            policy,
            personalize=bool(data.get("personalize", False)),
            window=stats.window,
            app_state=PolicyState.from_dict(data["app"]),
        )
        registry.stats = stats
        for user, state_data in data.get("users", {}).items():
            state = PolicyState.from_dict(state_data)
            policy.reconcile(state)
            registry.users[str(user)] = state
        return registry

    def _states(self) -> list[PolicyState]:
        return [self.app, *self.users.values()]

    def _fixed(self) -> FixedPolicy:
        if not isinstance(self.policy, FixedPolicy):
            raise ValueError(f"a traffic split needs the fixed policy, not {self.policy.name!r}")
        return self.policy
