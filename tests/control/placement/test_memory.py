"""A worker's memory share, worked by hand: accounting, and which models make room for a load.

Sizes are in MB and times in seconds; `last_used` orders least recently used first.
"""

from __future__ import annotations

import pytest

from headway.control.placement.memory import WorkerMemory


def full_share() -> WorkerMemory:
    """100 MB held by four 25 MB models; `busy` ones have queued requests.

    Least recently used first: d (busy, t=0), a (busy, t=1), b (idle, t=2), c (idle, t=3).
    """
    memory = WorkerMemory(100.0)
    memory.add("a", 25.0, now=1.0)
    memory.add("b", 25.0, now=2.0)
    memory.add("c", 25.0, now=3.0)
    memory.add("d", 25.0, now=0.0)
    return memory


BUSY = {"a", "d"}


def idle(key: str) -> bool:
    return key not in BUSY


def test_accounting_add_resize_remove() -> None:
    memory = WorkerMemory(100.0)
    assert (memory.used_mb, memory.free_mb) == (0.0, 100.0)
    memory.add("a", 30.0, now=0.0)
    memory.add("b", 20.0, now=1.0)
    assert (memory.used_mb, memory.free_mb) == (50.0, 50.0)
    assert "a" in memory and "z" not in memory

    memory.resize("a", 45.0)  # the measured size replaces the estimate
    assert (memory.used_mb, memory.free_mb) == (65.0, 35.0)
    memory.resize("z", 99.0)  # not resident: nothing to resize
    assert memory.used_mb == 65.0

    memory.add("a", 10.0, now=2.0)  # adding again replaces, never double counts
    assert memory.used_mb == 30.0
    assert memory.resident["a"].last_used == 2.0

    memory.remove("b")
    memory.remove("b")  # twice is harmless
    assert (memory.used_mb, sorted(memory.resident)) == (10.0, ["a"])
    memory.remove("a")
    assert (memory.used_mb, memory.resident) == (0.0, {})


def test_unbounded_share_never_evicts() -> None:
    memory = WorkerMemory(None)
    memory.add("a", 1e9, now=0.0)
    assert memory.free_mb == float("inf")
    assert memory.victims(1e12, pinned=set(), idle=idle) == []


def test_nothing_to_evict_when_it_fits() -> None:
    memory = WorkerMemory(100.0)
    memory.add("a", 60.0, now=0.0)
    assert memory.victims(40.0, pinned=set(), idle=idle) == []  # exactly the free space
    assert memory.victims(40.5, pinned=set(), idle=idle) == ["a"]


def test_larger_than_the_whole_share_never_fits() -> None:
    memory = WorkerMemory(100.0)
    assert memory.victims(100.5, pinned=set(), idle=idle) is None  # even when empty
    assert memory.victims(100.0, pinned=set(), idle=idle) == []


@pytest.mark.parametrize(
    ("size", "victims"),
    [
        (10.0, ["b"]),  # one idle model is enough: the least recently used idle one
        (25.0, ["b"]),
        (30.0, ["b", "c"]),  # both idle ones before any busy one
        (60.0, ["b", "c", "d"]),  # then busy ones, least recently used first
        (100.0, ["b", "c", "d", "a"]),
    ],
)
def test_idle_models_go_first_then_least_recently_used(size: float, victims: list[str]) -> None:
    assert full_share().victims(size, pinned=set(), idle=idle) == victims


@pytest.mark.parametrize(
    ("size", "victims"),
    [(10.0, ["d"]), (30.0, ["d", "a"]), (60.0, ["d", "a", "b"])],
)
def test_without_idle_first_it_is_plain_lru(size: float, victims: list[str]) -> None:
    memory = full_share()
    assert memory.victims(size, pinned=set(), idle=idle, idle_first=False) == victims


def test_pinned_models_are_never_evicted() -> None:
    memory = full_share()
    assert memory.victims(30.0, pinned={"b"}, idle=idle) == ["c", "d"]
    assert memory.victims(75.0, pinned={"b"}, idle=idle) == ["c", "d", "a"]
    assert memory.victims(80.0, pinned={"b"}, idle=idle) is None  # only b's 25 MB would do
    assert memory.victims(30.0, pinned={"d"}, idle=idle, idle_first=False) == ["a", "b"]


def test_touch_moves_a_model_to_most_recently_used() -> None:
    memory = full_share()
    memory.touch("b", now=9.0)
    assert memory.victims(10.0, pinned=set(), idle=idle) == ["c"]
    memory.touch("z", now=10.0)  # not resident: ignored
    assert "z" not in memory


def test_victims_do_not_change_the_accounting() -> None:
    memory = full_share()
    assert memory.victims(50.0, pinned=set(), idle=idle) == ["b", "c"]
    assert (memory.used_mb, len(memory.resident)) == (100.0, 4)
