"""The query log that joins feedback with its query, and the latency window."""

from __future__ import annotations

import pytest

from headway.apps.records import Latencies, QueryLog, QueryRecord
from headway.selection import Selection


def record(digest: bytes, user: str | None = None) -> QueryRecord:
    return QueryRecord(Selection(("a",), {"a": 1.0}), {"a": 1}, 1, user, digest)


def test_the_log_keeps_the_last_queries_and_finds_them_by_input_and_user() -> None:
    log = QueryLog(capacity=3)
    for i in range(5):
        log.add(f"q{i}", record(bytes([i % 2]), user="ann"))
    assert len(log) == 3
    assert log.get("q0") is None and log.get("q1") is None and log.get("q4") is not None
    found = log.find(bytes([0]), "ann")
    assert found is not None and found[0] == "q4"  # the latest query with that input
    assert log.find(bytes([0]), None) is None  # another user (or none) is another query
    assert log.find(bytes([1]), "ann") == ("q3", log.get("q3"))


def test_evicting_a_query_forgets_its_input_only_when_it_was_the_latest() -> None:
    log = QueryLog(capacity=2)
    log.add("old", record(b"x"))
    log.add("new", record(b"x"))
    log.add("other", record(b"y"))  # evicts "old"; "new" still answers for input x
    assert log.find(b"x", None) == ("new", log.get("new"))
    log.add("more", record(b"z"))  # evicts "new": input x is gone
    assert log.find(b"x", None) is None


def test_latencies_summarise_the_recent_window_in_milliseconds() -> None:
    latencies = Latencies(size=100)
    assert latencies.summary() == {"count": 0, "mean_ms": None, "p50_ms": None, "p99_ms": None}
    for ms in range(1, 201):
        latencies.observe(ms / 1000)
    summary = latencies.summary()
    assert summary["count"] == 200
    assert summary["mean_ms"] == pytest.approx(150.5)  # the last 100: 101..200 ms
    assert summary["p50_ms"] == pytest.approx(150.5)
