"""What a flow app's select operators learn: the selections each recent query made, so that
feedback on the query reaches them, and which operators' state changed since it was saved."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

from headway.apps.application import FeedbackResult, UnknownQuery
from headway.errors import InvalidInput
from headway.flows.plan import SOURCE, FlowPlan
from headway.flows.select import Select
from headway.selection import Selection, StateRegistry

log = logging.getLogger("headway.flows")
#: Queries whose selections feedback can still reach, per flow application.
SELECTION_LOG = 10_000

#: One selection a query made: the select operator's label, the selection, the answers.
Made = tuple[str, Selection, dict[str, Any]]


class SelectState:
    """The select operators of one flow app (`selects`, by label) and their learned state."""

    def __init__(self, app: str, plan: FlowPlan) -> None:
        self.app = app
        self.selects = {
            label: op for stage in plan.stages if stage.kind != SOURCE
            for op, label in plan.ops(stage) if isinstance(op, Select)
        }  # fmt: skip
        self.made: OrderedDict[str, list[Made]] = OrderedDict()
        self._dirty: set[str] = set()

    def remember(self, query_id: str, made: list[Made]) -> None:
        """The selections one query made, for feedback on it (the last SELECTION_LOG)."""
        self.made[query_id] = made
        while len(self.made) > SELECTION_LOG:
            self.made.popitem(last=False)

    def changed(self, label: str) -> None:
        """The select operator `label` learned something (it is saved with the next rows)."""
        self._dirty.add(label)

    def feedback(self, label: Any, query_id: str | None, user: str | None) -> FeedbackResult:
        """Teach each selection the query made (found by its query id) its true label."""
        if not self.selects:
            raise InvalidInput(f"app {self.app!r} is a flow without a select operator: no feedback")
        made = self.made.get(query_id or "")
        if made is None:
            raise UnknownQuery(
                f"app {self.app!r}: unknown query id {query_id!r} (the last {SELECTION_LOG} "
                "queries that made a selection are kept)"
            )
        losses: dict[str, float] = {}
        for op_label, selection, answers in made:
            op = self.selects[op_label]
            try:
                judged = op.registry.observe(label, answers, selection)
            except (ValueError, TypeError) as exc:
                raise InvalidInput(f"app {self.app!r}: label {label!r:.80}: {exc}") from None
            losses.update({f"{op_label}/{m}": loss for m, loss in judged.items()})
            self._dirty.add(op_label)
        updates = sum(op.registry.app.updates for op in self.selects.values())
        return FeedbackResult(query_id, user, None, losses, updates)

    def take_dirty(self) -> dict[str, dict[str, Any]]:
        """The learned state of each select operator changed since the last call, as store
        rows keyed `select:<operator>`."""
        rows = {f"select:{label}": self.selects[label].registry.to_dict() for label in self._dirty}
        self._dirty = set()
        return rows

    def mark_all_dirty(self) -> None:
        self._dirty.update(self.selects)

    def restore(self, rows: dict[str, dict[str, Any]]) -> None:
        """Carry over the select operators' stored state (when their policy is the same)."""
        for label, op in self.selects.items():
            row = rows.get(f"select:{label}")
            if row is None or row.get("policy", {}).get("name") != op.policy:
                continue
            try:
                op.registry = StateRegistry.from_dict(row)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("app %s: %s: stored state unusable (%s)", self.app, label, exc)

    def statistics(self) -> dict[str, list[dict[str, Any]]]:
        """Each select operator's models with their selection statistics."""
        return {
            label: [asdict(m) for m in op.registry.statistics().models]
            for label, op in self.selects.items()
        }
