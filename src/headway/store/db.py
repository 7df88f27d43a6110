"""The one SQLite database: connection, WAL mode, schema versions, and the model table.

Later layers add their tables as further migrations here, so one module owns the schema.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE models (
        name TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        state TEXT NOT NULL,          -- 'loaded' or 'unloaded': what the user asked for
        reason TEXT NOT NULL DEFAULT '',
        updated REAL NOT NULL
    );
    CREATE TABLE profiles (
        model TEXT NOT NULL,
        batch_size INTEGER NOT NULL,
        seconds REAL NOT NULL,
        hardware TEXT NOT NULL DEFAULT 'cpu',
        updated REAL NOT NULL,
        PRIMARY KEY (model, batch_size, hardware)
    );
    """,
    """
    CREATE TABLE apps (
        name TEXT PRIMARY KEY,
        config TEXT NOT NULL,         -- JSON: the application as it is served
        declared TEXT,                -- JSON: the config file's entry it came from, if any
        updated REAL NOT NULL
    );
    CREATE TABLE selection_state (
        app TEXT NOT NULL,
        user TEXT NOT NULL,           -- '' for the app-wide state
        state TEXT NOT NULL,          -- JSON: PolicyState (app-wide: with the statistics)
        updated REAL NOT NULL,
        PRIMARY KEY (app, user)
    );
    CREATE TABLE feedback (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        app TEXT NOT NULL,
        user TEXT NOT NULL DEFAULT '',
        query_id TEXT,
        label TEXT NOT NULL,          -- JSON
        output TEXT,                  -- JSON: what the query was answered with
        losses TEXT NOT NULL,         -- JSON: model -> loss in [0, 1]
        ts REAL NOT NULL
    );
    CREATE INDEX feedback_app ON feedback(app, id);
    """,
    # measured profiles (`headway profile`, store/profiles.py): the latency distribution per
    # (model, hardware kind, batch size) beside the scheduler's rolling estimate (`seconds`)
    """
    ALTER TABLE profiles ADD COLUMN mean REAL;
    ALTER TABLE profiles ADD COLUMN p50 REAL;
    ALTER TABLE profiles ADD COLUMN p99 REAL;
    ALTER TABLE profiles ADD COLUMN throughput REAL;
    ALTER TABLE profiles ADD COLUMN samples INTEGER;
    ALTER TABLE profiles ADD COLUMN source TEXT;
    """,
    """
    CREATE TABLE lookups (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL,          -- JSON: what a flow's lookup(key) reads
        updated REAL NOT NULL
    );
    """,
    # how noisy a measured profile was: the range of the profiler's rounds' means (and p99s)
    # over the row's own (store/profiles.py)
    """
    ALTER TABLE profiles ADD COLUMN spread REAL;
    ALTER TABLE profiles ADD COLUMN p99_spread REAL;
    """,
)


#: SQLite's `synchronous` settings a server may choose (`--state-sync`). In WAL mode, `normal`
#: makes every committed transaction survive a crash of the process (kill -9, out of memory)
#: without waiting for the disk; `full` also waits for the disk at each commit, so a crash of
#: the machine (power loss) loses nothing committed either, at the cost of a flush per write on
#: the server's event loop.
SYNC_MODES = ("normal", "full")


class Store:
    """Durable state: registrations, loads, selection state, the feedback log. Each write is
    one transaction, committed before the call returns (`docs/operations.md`)."""

    def __init__(self, path: str | Path, *, sync: str = "normal") -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"state sync must be one of {SYNC_MODES}, got {sync!r}")
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={sync.upper()}")
        self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                self._db.executescript(f"BEGIN; {script}; PRAGMA user_version = {number}; COMMIT;")

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- for the table modules beside this one (store/apps.py) -------------------------------
    def execute(self, sql: str, rows: Sequence[Sequence[Any]] = ((),)) -> None:
        """Run one write statement for each parameter row, in one transaction."""
        self.transaction([(sql, rows)])

    def transaction(self, steps: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
        """Run (statement, parameter rows) steps as one transaction: all or nothing."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for sql, rows in steps:
                    self._db.executemany(sql, rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # -- models -------------------------------------------------------------------------------
    def set_model_state(self, name: str, version: int, state: str, reason: str = "") -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO models(name, version, state, reason, updated) VALUES (?,?,?,?,?) "
                "ON CONFLICT(name) DO UPDATE SET version=excluded.version, state=excluded.state, "
                "reason=excluded.reason, updated=excluded.updated",
                (name, version, state, reason, time.time()),
            )

    def model_states(self) -> dict[str, tuple[int, str, str]]:
        """name -> (version, state, reason) as last recorded."""
        with self._lock:
            rows = self._db.execute("SELECT name, version, state, reason FROM models").fetchall()
        return {name: (version, state, reason) for name, version, state, reason in rows}

    # -- profiles -----------------------------------------------------------------------------
    def save_profile(self, model: str, estimates: dict[int, float], hardware: str = "cpu") -> None:
        now = time.time()
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO profiles(model, batch_size, seconds, hardware, updated) "
                "VALUES (?,?,?,?,?)",
                [(model, b, s, hardware, now) for b, s in estimates.items()],
            )

    def profile(self, model: str, hardware: str = "cpu") -> dict[int, float]:
        with self._lock:
            rows = self._db.execute(
                "SELECT batch_size, seconds FROM profiles WHERE model=? AND hardware=?",
                (model, hardware),
            ).fetchall()
        return dict(rows)
