"""Lookup values: put through the API's `Lookups`, kept in SQLite, read back after a restart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headway.errors import InvalidInput, ModelNotFound
from headway.flows.lookups import Lookups
from headway.store import Store


def test_values_survive_a_restart_and_read_as_json(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    lookups = Lookups(store)
    lookups.put("user:1", {"features": np.arange(3)})
    lookups.put("gone", 1)
    lookups.delete("gone")
    store.close()
    again = Lookups(Store(tmp_path / "state.db"))
    assert again.get("user:1") == {"features": [0, 1, 2]}  # what a lookup reads is JSON
    assert again.lookup("gone") is None  # never put (or removed): NULL
    with pytest.raises(ModelNotFound, match="no lookup value under key 'gone'"):
        again.get("gone")


def test_bad_keys_and_values_are_refused() -> None:
    lookups = Lookups()
    with pytest.raises(InvalidInput, match="1 to 512 characters"):
        lookups.put("", 1)
    with pytest.raises(InvalidInput, match="lookup 'k': the value is not JSON"):
        lookups.put("k", object())
