"""The profiler measures a model warm, its batch sizes shuffled, in rounds whose spread is
the noise figure `headway profile` prints."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from headway.planning.description import profile_rows_document, read_profile_rows
from headway.planning.plan_file import write_plan
from headway.planning.profiler import measuring_order, spread, summarise
from headway.store import Store
from headway.store.profiles import MeasuredProfile, measured, save_measured

SIZES = (1, 2, 4, 8, 16, 32)


def test_every_size_is_warm_before_anything_is_measured() -> None:
    order = measuring_order(SIZES, 20, warmup=3, rounds=4, seed=1)
    first = next(i for i, call in enumerate(order) if call.round is not None)
    assert all(call.round is None for call in order[:first])
    assert all(call.round is not None for call in order[first:])
    assert Counter(call.batch for call in order[:first]) == {b: 3 for b in SIZES}


def test_the_measured_calls_are_split_into_shuffled_rounds() -> None:
    order = [
        c for c in measuring_order(SIZES, 10, warmup=1, rounds=4, seed=1) if c.round is not None
    ]
    assert Counter(c.batch for c in order) == {b: 10 for b in SIZES}
    per_round = Counter((c.round, c.batch) for c in order)
    assert [per_round[r, 1] for r in range(4)] == [3, 3, 2, 2]  # 10 calls over 4 rounds
    rounds = [[c.batch for c in order if c.round == r] for r in range(4)]
    assert [c.round for c in order] == sorted(c.round for c in order)  # one round after another
    assert rounds[0][: len(SIZES)] != list(SIZES)  # not in size order: batch 1 is not first
    assert len({tuple(r) for r in rounds}) == 4  # each round in an order of its own


def test_the_order_is_the_seed_s() -> None:
    assert measuring_order(SIZES, 10, seed=3) == measuring_order(SIZES, 10, seed=3)
    assert measuring_order(SIZES, 10, seed=3) != measuring_order(SIZES, 10, seed=4)


def test_fewer_calls_than_rounds_make_one_round_a_call() -> None:
    order = measuring_order((1, 4), 3, warmup=0, rounds=5)
    assert sorted({c.round for c in order}) == [0, 1, 2]  # type: ignore[type-var]


def test_a_row_says_how_far_apart_its_rounds_were() -> None:
    rounds = [[0.010, 0.010], [0.012, 0.012], [0.008, 0.008, 0.008, 0.008]]
    row = summarise("m", "cpu1", 4, rounds)
    assert row.samples == 8 and row.mean == pytest.approx(0.0095)
    assert row.spread == pytest.approx((0.012 - 0.008) / 0.0095)
    assert row.p99_spread is not None and row.p99_spread > 0
    assert row.throughput == pytest.approx(4 / 0.0095)
    assert summarise("m", "cpu1", 1, [[0.01, 0.02]]).spread is None  # one round: no spread
    assert spread([1.0, 1.0], 1.0) == 0.0


def test_the_spread_is_kept_exported_and_imported(tmp_path: Path) -> None:
    row = MeasuredProfile("m", "cpu1", 2, 0.01, 0.009, 0.02, 200, 50, spread=0.06, p99_spread=0.4)
    store = Store(tmp_path / "state.db")
    save_measured(store, [row])
    assert measured(store) == [row]
    write_plan(profile_rows_document([row]), tmp_path / "profiles.yaml")
    back = read_profile_rows(tmp_path / "profiles.yaml")[0]
    assert (back.spread, back.p99_spread) == (0.06, 0.4)
