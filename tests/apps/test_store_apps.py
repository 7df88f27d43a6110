"""The app tables of the store: configuration, selection state per user, feedback log."""

from __future__ import annotations

from pathlib import Path

import pytest

from headway.store import Store
from headway.store.apps import AppStore
from headway.store.db import MIGRATIONS


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


def test_apps_and_their_config_file_entry_survive_reopening(path: Path) -> None:
    store = Store(path)
    apps = AppStore(store)
    apps.save_app("digits", {"models": ["a"], "policy": "exp4"}, {"models": ["a"]})
    apps.save_app("api-made", {"models": ["b"]})
    apps.save_app("digits", {"models": ["a", "c"], "policy": "exp4"}, {"models": ["a"]})
    store.close()
    store = Store(path)
    assert store.schema_version == len(MIGRATIONS)
    stored = AppStore(store).apps()
    assert stored["digits"].config == {"models": ["a", "c"], "policy": "exp4"}
    assert stored["digits"].declared == {"models": ["a"]}
    assert stored["api-made"].declared is None
    store.close()


def test_states_are_upserted_per_user_and_deleted_with_the_app(path: Path) -> None:
    apps = AppStore(Store(path))
    apps.save_app("digits", {"models": ["a"]})
    apps.save_states("digits", {"": {"state": {"updates": 1}}, "ann": {"updates": 1}})
    apps.save_states("digits", {"ann": {"updates": 2}})
    apps.save_states("digits", {})
    assert apps.states("digits") == {"": {"state": {"updates": 1}}, "ann": {"updates": 2}}
    apps.save_states("other", {"": {"x": 1}})
    apps.delete_app("digits")
    assert apps.states("digits") == {} and "digits" not in apps.apps()
    assert apps.states("other") == {"": {"x": 1}}


def test_the_feedback_log_is_appended_and_kept(path: Path) -> None:
    apps = AppStore(Store(path))
    apps.append_feedback("digits", None, "q1", 7, 7, {"a": 0.0, "b": 1.0})
    apps.append_feedback("digits", "ann", None, [1, 2], -1, {})
    apps.append_feedback("other", "bob", "q3", "cat", "dog", {"c": 1.0})
    assert apps.feedback_count("digits") == 2
    rows = apps.feedback("digits")
    assert [(r.user, r.query_id, r.label, r.output, r.losses) for r in rows] == [
        ("", "q1", 7, 7, {"a": 0.0, "b": 1.0}),
        ("ann", None, [1, 2], -1, {}),
    ]
    assert [r.query_id for r in apps.feedback("digits", last=1)] == [None]
    apps.delete_app("digits")  # the log is history: deleting the app keeps it
    assert apps.feedback_count("digits") == 2


def test_a_failed_write_rolls_back_the_whole_batch(path: Path) -> None:
    store = Store(path)
    with pytest.raises(Exception, match="NOT NULL"):
        store.execute(
            "INSERT INTO selection_state(app, user, state, updated) VALUES (?,?,?,?)",
            [("a", "", "{}", 1.0), ("a", "u", None, 1.0)],
        )
    assert store.query("SELECT COUNT(*) FROM selection_state") == [(0,)]
    store.execute("INSERT INTO apps(name, config, updated) VALUES ('x', '{}', 0)")
    assert store.query("SELECT name FROM apps") == [("x",)]


def test_replacing_states_drops_the_old_rows_in_the_same_transaction(path: Path) -> None:
    apps = AppStore(Store(path))
    apps.save_states("digits", {"": {"policy": "exp3"}, "ann": {"policy": "exp3"}})
    apps.save_states("digits", {"": {"policy": "exp4"}}, replace=True)
    assert apps.states("digits") == {"": {"policy": "exp4"}}
