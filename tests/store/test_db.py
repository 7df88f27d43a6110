"""The SQLite store: schema migrations, WAL mode, model states and profiles across reopen."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from headway.store.db import MIGRATIONS, Store


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "headway.db"  # the folder does not exist yet


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Store]:
    store = Store(path)
    try:
        yield store
    finally:
        store.close()


def raw(path: Path, sql: str) -> list[tuple]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def test_migrations_set_the_schema_version(path: Path) -> None:
    with opened(path) as store:
        assert store.schema_version == len(MIGRATIONS)
    assert raw(path, "PRAGMA user_version") == [(len(MIGRATIONS),)]
    tables = {name for (name,) in raw(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"models", "profiles"} <= tables


def test_reopening_does_not_migrate_again(path: Path) -> None:
    with opened(path) as store:
        store.set_model_state("m", 1, "loaded")
    with opened(path) as store:  # CREATE TABLE again would fail
        assert store.schema_version == len(MIGRATIONS)
        assert store.model_states() == {"m": (1, "loaded", "")}


def test_wal_mode_is_on(path: Path) -> None:
    with opened(path):
        pass
    assert raw(path, "PRAGMA journal_mode") == [("wal",)]


def test_model_state_upserts_and_survives_reopen(path: Path) -> None:
    with opened(path) as store:
        assert store.model_states() == {}
        store.set_model_state("iris", 1, "loaded")
        store.set_model_state("digits", 3, "loaded")
        store.set_model_state("iris", 2, "unloaded", reason="unloaded through the API")
        assert store.model_states() == {
            "iris": (2, "unloaded", "unloaded through the API"),
            "digits": (3, "loaded", ""),
        }
    with opened(path) as store:
        assert store.model_states() == {
            "iris": (2, "unloaded", "unloaded through the API"),
            "digits": (3, "loaded", ""),
        }
    assert raw(path, "SELECT COUNT(*) FROM models") == [(2,)]


def test_profiles_save_and_load(path: Path) -> None:
    with opened(path) as store:
        assert store.profile("m") == {}
        store.save_profile("m", {1: 0.010, 4: 0.025})
        store.save_profile("m", {4: 0.030, 8: 0.050})  # replaces size 4, adds 8
        store.save_profile("m", {1: 0.002}, hardware="gpu")
        store.save_profile("other", {1: 1.0})
    with opened(path) as store:
        assert store.profile("m") == {1: 0.010, 4: 0.030, 8: 0.050}
        assert store.profile("m", hardware="gpu") == {1: 0.002}
        assert store.profile("other") == {1: 1.0}
        assert store.profile("missing") == {}


def test_in_memory_store() -> None:
    store = Store(":memory:")
    try:
        assert store.schema_version == len(MIGRATIONS)
        store.set_model_state("m", 1, "loaded")
        assert store.model_states() == {"m": (1, "loaded", "")}
    finally:
        store.close()


@pytest.mark.parametrize(("sync", "level"), [("normal", 1), ("full", 2)])
def test_the_sync_mode_is_sqlites_synchronous(path: Path, sync: str, level: int) -> None:
    store = Store(path, sync=sync)
    try:
        assert store.query("PRAGMA synchronous") == [(level,)]
    finally:
        store.close()
    with pytest.raises(ValueError, match="state sync must be one of"):
        Store(path, sync="off")
