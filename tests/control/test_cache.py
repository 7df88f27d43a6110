"""The prediction cache: bounded, CLOCK-evicted, keyed on model version, outputs and input bytes."""

from __future__ import annotations

import numpy as np
import pytest

from headway.control.cache import PredictionCache, cache_key

X = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}


def test_hits_and_misses_are_counted() -> None:
    cache = PredictionCache(100)
    key = cache_key("m@1", X, None)
    assert cache.get(key) is None
    assert cache.put(key, "answer", 10)
    assert cache.get(key) == "answer"
    assert cache.get(key) == "answer"
    assert (cache.hits, cache.misses) == (2, 1)
    assert len(cache) == 1
    assert cache.size == 10


def test_value_larger_than_the_cache_is_not_stored_and_evicts_nothing() -> None:
    cache = PredictionCache(100)
    cache.put(b"small", "s", 60)
    assert cache.put(b"huge", "h", 101) is False
    assert cache.get(b"huge") is None
    assert cache.get(b"small") == "s"
    assert cache.size == 60
    assert cache.put(b"exact", "e", 100) is True  # exactly the capacity fits (alone)
    assert cache.size == 100
    assert cache.get(b"small") is None


def test_size_stays_within_capacity() -> None:
    cache = PredictionCache(50)
    for i in range(40):
        cache.put(bytes([i]), i, 7)
        assert cache.size <= 50
    assert len(cache) == 7


def test_replacing_a_key_replaces_its_size() -> None:
    cache = PredictionCache(100)
    cache.put(b"k", "v1", 30)
    cache.put(b"k", "v2", 50)
    assert cache.size == 50
    assert len(cache) == 1
    assert cache.get(b"k") == "v2"


def test_clock_gives_a_used_entry_a_second_chance() -> None:
    cache = PredictionCache(3)
    for key in (b"a", b"b", b"c"):
        cache.put(key, key, 1)
    cache.get(b"a")  # a is used since the hand last passed
    cache.put(b"d", b"d", 1)  # the hand spares a (clearing its bit) and evicts b
    assert cache.get(b"b") is None
    cache.put(b"e", b"e", 1)  # the hand moves on from where it stopped: c goes, not a
    assert cache.get(b"c") is None
    assert cache.get(b"a") == b"a"
    assert cache.get(b"d") == b"d"
    assert cache.get(b"e") == b"e"


def test_second_chance_is_spent_once() -> None:
    cache = PredictionCache(2)
    cache.put(b"a", 1, 1)
    cache.put(b"b", 2, 1)
    cache.get(b"a")
    cache.get(b"b")
    cache.put(b"c", 3, 1)  # both used: the hand clears both, comes round, evicts a
    assert len(cache) == 2
    assert cache.get(b"a") is None
    assert cache.get(b"b") == 2


def test_replacing_a_key_does_not_move_the_hand_past_the_next_victim() -> None:
    cache = PredictionCache(3)
    for key in (b"a", b"b", b"c"):
        cache.put(key, key, 1)
    cache.get(b"a")
    cache.get(b"b")
    cache.put(b"d", b"d", 1)  # spares a and b, evicts c; the hand now points at d
    assert cache.get(b"c") is None
    cache.put(b"a", b"a2", 1)  # a is rewritten: it goes to the back of the ring
    cache.put(b"e", b"e", 1)  # the hand is still at d: d (unused) goes, not the fresh a
    assert cache.get(b"d") is None
    assert cache.get(b"a") == b"a2"


def test_key_is_stable_for_equal_inputs() -> None:
    copy = {"x": X["x"].copy()}
    assert cache_key("m@1", X, None) == cache_key("m@1", copy, None)
    # A non-contiguous view with the same values is the same input.
    wide = np.arange(12, dtype=np.float32).reshape(2, 6)
    view = {"x": wide[:, ::2]}
    assert cache_key("m@1", view, None) == cache_key("m@1", {"x": view["x"].copy()}, None)


@pytest.mark.parametrize(
    ("model", "inputs", "outputs"),
    [
        ("m@2", X, None),  # another version of the model
        ("n@1", X, None),  # another model
        ("m@1", X, ("label",)),  # other outputs asked for
        ("m@1", {"x": X["x"].astype(np.float64)}, None),  # same values, other dtype
        ("m@1", {"x": X["x"].reshape(3, 2)}, None),  # same bytes, other shape
        ("m@1", {"x": X["x"] + 1}, None),  # other bytes
        ("m@1", {"y": X["x"]}, None),  # other input name
        ("m@1", {"x": X["x"], "y": X["x"]}, None),  # one more input
    ],
)
def test_key_changes_with_everything_that_changes_the_answer(
    model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...] | None
) -> None:
    assert cache_key(model, inputs, outputs) != cache_key("m@1", X, None)


def test_key_of_bytes_tensors_depends_on_element_boundaries() -> None:
    def key(*items: bytes) -> bytes:
        array = np.empty(len(items), dtype=object)
        array[:] = list(items)
        return cache_key("m@1", {"s": array}, None)

    assert key(b"ab", b"c") == key(b"ab", b"c")
    assert key(b"ab", b"c") != key(b"a", b"bc")
    assert key(b"ab", b"c") != key(b"ab", b"d")
