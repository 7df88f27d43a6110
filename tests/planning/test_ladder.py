"""The ladder: InferLine's replicas added one at a time, known by arithmetic, searched by
doubling and bisection."""

from __future__ import annotations

import pytest

from headway.planning.ladder import climb, first_rung
from headway.planning.pipeline import Configuration, StageConfig


@pytest.mark.parametrize("answer", [None, 0, 1, 2, 3, 5, 17, 63, 64, 99])
def test_first_rung_finds_the_first_index_that_holds(answer: int | None) -> None:
    tried: list[int] = []

    def holds(i: int) -> bool:
        tried.append(i)
        return answer is not None and i >= answer

    assert first_rung(100, holds) == answer
    assert len(tried) <= 2 * 7 + 1  # about 2 log2(100), never a walk


def test_first_rung_tries_the_start_then_the_next_like_a_walk() -> None:
    tried: list[int] = []
    assert first_rung(50, lambda i: tried.append(i) or i >= 11, start=10) == 11
    assert tried == [10, 11]


def test_first_rung_with_nothing_to_try() -> None:
    assert first_rung(5, lambda i: True, start=5) is None


def test_climb_adds_a_replica_at_the_bottleneck_until_its_most() -> None:
    start = Configuration({"a": StageConfig("cpu"), "b": StageConfig("cpu")})
    speed = {"a": 100.0, "b": 250.0}  # a stage's throughput per replica

    def bottleneck(c: Configuration) -> str:
        return min(c.stages, key=lambda s: c[s].replicas * speed[s])

    ladder = climb(start, bottleneck, lambda c, s: 3)
    counts = [(c["a"].replicas, c["b"].replicas) for c in ladder.rungs]
    assert counts == [(1, 1), (2, 1), (3, 1), (3, 2)]
    assert ladder.added == ["a", "a", "b"]  # then a, the bottleneck again, is at its most
    assert ladder.stopped == "a"
    assert ladder.stages_added(3) == {"a": 2, "b": 1}
