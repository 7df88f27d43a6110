"""Values that flows look up (a user's features, a category's items): one JSON row per key."""

from __future__ import annotations

import time
from typing import Any

import orjson

from headway.store.db import Store


class LookupStore:
    """The `lookups` table of one `Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def put(self, key: str, value: Any) -> None:
        text = orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        self.store.execute(
            "INSERT INTO lookups(key, value, updated) VALUES (?,?,?) ON CONFLICT(key) DO UPDATE "
            "SET value=excluded.value, updated=excluded.updated",
            [(key, text, time.time())],
        )

    def delete(self, key: str) -> None:
        self.store.execute("DELETE FROM lookups WHERE key=?", [(key,)])

    def all(self) -> dict[str, Any]:
        return {k: orjson.loads(v) for k, v in self.store.query("SELECT key, value FROM lookups")}
