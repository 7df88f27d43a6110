"""The one SQLite database: connection, WAL mode, schema versions, and the model table.

Later layers add their tables as further migrations here, so one module owns the schema.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

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
)


class Store:
    """Durable state. Writes are rare (registrations, loads); reads happen at start-up."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
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
