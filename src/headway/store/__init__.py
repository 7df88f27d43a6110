"""Store: SQLite (WAL) state that survives a restart."""

from headway.store.db import Store

__all__ = ["Store"]
