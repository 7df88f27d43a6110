"""Applications in the store: their configuration, selection state per user, and feedback log.

Plain JSON in three tables (schema in `store/db.py`): `apps` (what is served, and the config
file entry it came from), `selection_state` (one row per application and user, `''` for the
app-wide state) and `feedback` (append-only: one row per feedback event).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from headway.store.db import Store

APP_WIDE = ""


def _dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()


@dataclass(frozen=True)
class StoredApp:
    config: dict[str, Any]
    declared: dict[str, Any] | None


@dataclass(frozen=True)
class FeedbackRow:
    id: int
    app: str
    user: str
    query_id: str | None
    label: Any
    output: Any
    losses: dict[str, float]
    ts: float


class AppStore:
    """The app tables of one `Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- applications -------------------------------------------------------------------------
    def save_app(
        self, name: str, config: Mapping[str, Any], declared: Mapping[str, Any] | None = None
    ) -> None:
        self.store.execute(
            "INSERT INTO apps(name, config, declared, updated) VALUES (?,?,?,?) "
            "ON CONFLICT(name) DO UPDATE SET config=excluded.config, "
            "declared=excluded.declared, updated=excluded.updated",
            [(name, _dumps(config), None if declared is None else _dumps(declared), time.time())],
        )

    def apps(self) -> dict[str, StoredApp]:
        rows = self.store.query("SELECT name, config, declared FROM apps ORDER BY name")
        return {
            name: StoredApp(
                orjson.loads(config), None if declared is None else orjson.loads(declared)
            )
            for name, config, declared in rows
        }

    def delete_app(self, name: str) -> None:
        """Forget the application and its selection state (its feedback log is history: kept)."""
        self.store.execute("DELETE FROM apps WHERE name=?", [(name,)])
        self.delete_states(name)

    # -- selection state ----------------------------------------------------------------------
    def save_states(
        self, app: str, states: Mapping[str, Mapping[str, Any]], *, replace: bool = False
    ) -> None:
        """Upsert the given users' states (`''`: the app-wide one) in one transaction;
        with `replace`, the app's other stored states are dropped in the same transaction."""
        steps = _state_steps(app, states)
        if replace:
            steps.insert(0, ("DELETE FROM selection_state WHERE app=?", [(app,)]))
        if steps:
            self.store.transaction(steps)

    def states(self, app: str) -> dict[str, dict[str, Any]]:
        rows = self.store.query("SELECT user, state FROM selection_state WHERE app=?", (app,))
        return {user: orjson.loads(state) for user, state in rows}

    def delete_states(self, app: str) -> None:
        self.store.execute("DELETE FROM selection_state WHERE app=?", [(app,)])

    # -- feedback log -------------------------------------------------------------------------
    def append_feedback(
        self,
        app: str,
        user: str | None,
        query_id: str | None,
        label: Any,
        output: Any,
        losses: Mapping[str, float],
        states: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Log one feedback event and, in the same transaction, the state rows it changed (as
        `save_states`): once this returns, a crash of the process loses neither."""
        event = (
            app,
            user or APP_WIDE,
            query_id,
            _dumps(label),
            _dumps(output),
            _dumps(dict(losses)),
            time.time(),
        )
        insert = (
            "INSERT INTO feedback(app, user, query_id, label, output, losses, ts) "
            "VALUES (?,?,?,?,?,?,?)"
        )
        self.store.transaction([(insert, [event]), *_state_steps(app, states or {})])

    def feedback(self, app: str, *, last: int | None = None) -> list[FeedbackRow]:
        """The app's feedback events, oldest first (only the `last` ones when given)."""
        sql = (
            "SELECT id, app, user, query_id, label, output, losses, ts FROM feedback "
            "WHERE app=? ORDER BY id DESC"
        )
        params: tuple[Any, ...] = (app,)
        if last is not None:
            sql += " LIMIT ?"
            params = (app, int(last))
        rows = self.store.query(sql, params)
        return [
            FeedbackRow(i, a, u, q, orjson.loads(lab), orjson.loads(out), orjson.loads(loss), ts)
            for i, a, u, q, lab, out, loss, ts in reversed(rows)
        ]

    def feedback_count(self, app: str) -> int:
        return int(self.store.query("SELECT COUNT(*) FROM feedback WHERE app=?", (app,))[0][0])


def _state_steps(
    app: str, states: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, Sequence[Sequence[Any]]]]:
    """The statements that upsert `states` (user -> state; `''` the app-wide one)."""
    if not states:
        return []
    now = time.time()
    upsert = (
        "INSERT INTO selection_state(app, user, state, updated) VALUES (?,?,?,?) "
        "ON CONFLICT(app, user) DO UPDATE SET state=excluded.state, updated=excluded.updated"
    )
    return [(upsert, [(app, user, _dumps(state), now) for user, state in states.items()])]
