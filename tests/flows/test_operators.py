"""Each operator's semantics, run in-process (`Flow.local`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from headway.flows import Flow, LocalServices, Model, Row, Table


def records(table: Table) -> list[tuple[int, dict[str, Any]]]:
    return list(zip(table.qids, table.records(), strict=True))


def double(row: Row) -> float:
    return float(row["x"]) * 2


def big(row: Row) -> bool:
    return bool(row["x"] > 1)


def small(row: Row) -> bool:
    return bool(row["x"] < 3)


ROWS = [{"x": 1.0, "k": "a"}, {"x": 2.0, "k": "b"}, {"x": 3.0, "k": "a"}]


def test_map_keeps_each_rows_query_id() -> None:
    flow = Flow("f", {"x": float, "k": str})
    flow.map(double)
    assert records(flow.local(ROWS)) == [(0, {"double": 2.0}), (1, {"double": 4.0}),
                                         (2, {"double": 6.0})]  # fmt: skip


def test_map_over_one_column_and_batching_map() -> None:
    flow = Flow("f", {"x": float, "k": str})

    def upper(value: str) -> str:
        return value.upper()

    flow.map(upper, col="k", names=["K"])
    assert [r["K"] for r in flow.local(ROWS).records()] == ["A", "B", "A"]

    batched = Flow("b", {"x": float, "k": str})

    def ranks(table: Table) -> list[int]:
        order = np.argsort(table.column("x"))[::-1]
        out = [0] * len(table)
        for rank, i in enumerate(order):
            out[int(i)] = rank
        return out

    batched.map(ranks, batching=True)
    assert [r["ranks"] for r in batched.local(ROWS).records()] == [2, 1, 0]


def test_init_runs_once_and_its_state_is_passed() -> None:
    calls = []

    def init() -> float:
        calls.append(1)
        return 10.0

    def scaled(factor: float, row: Row) -> float:
        return float(row["x"]) * factor

    flow = Flow("f", {"x": float, "k": str})
    flow.map(scaled, init=init)
    assert [r["scaled"] for r in flow.local(ROWS).records()] == [10.0, 20.0, 30.0]
    assert calls == [1]


def test_filter_keeps_true_rows() -> None:
    flow = Flow("f", {"x": float, "k": str})
    flow.filter(big)
    assert records(flow.local(ROWS)) == [(1, ROWS[1]), (2, ROWS[2])]


def test_union_concatenates_and_anyof_forwards_exactly_one_input() -> None:
    flow = Flow("f", {"x": float, "k": str})
    flow.filter(big).union(flow.filter(small))
    assert [q for q, _ in records(flow.local(ROWS))] == [1, 2, 0, 1]
    any_flow = Flow("g", {"x": float, "k": str})
    any_flow.filter(big).anyof(any_flow.filter(small))
    assert [q for q, _ in records(any_flow.local(ROWS))] == [1, 2]


def test_joins_on_the_query_id_inner_left_and_outer_with_missing_sides() -> None:
    results = {}
    for how in ("inner", "left", "outer"):
        flow = Flow("f", {"x": float, "k": str})
        left = flow.filter(big)  # qids 1, 2
        right = flow.filter(small).map(double)  # qids 0, 1
        left.join(right, how=how)
        results[how] = records(flow.local(ROWS))
    assert results["inner"] == [(1, {"x": 2.0, "k": "b", "double": 4.0})]
    assert results["left"] == [(1, {"x": 2.0, "k": "b", "double": 4.0}),
                               (2, {"x": 3.0, "k": "a", "double": None})]  # fmt: skip
    assert results["outer"] == [(1, {"x": 2.0, "k": "b", "double": 4.0}),
                                (2, {"x": 3.0, "k": "a", "double": None}),
                                (0, {"x": None, "k": None, "double": 2.0})]  # fmt: skip


def test_join_on_a_column_renames_clashing_right_columns() -> None:
    flow = Flow("f", {"x": float, "k": str})
    flow.filter(big).join(flow.filter(small), on="k", how="outer")
    assert records(flow.local(ROWS)) == [
        (1, {"x": 2.0, "k": "b", "x_right": 2.0}),
        (2, {"x": 3.0, "k": "a", "x_right": 1.0}),
    ]
    nobody = Flow("g", {"x": float, "k": str})
    nobody.filter(big).join(nobody.filter(big).map(double), how="outer")
    assert len(nobody.local([{"x": 0.0, "k": "z"}])) == 0


def test_groupby_agg_and_grouped_filters() -> None:
    flow = Flow("f", {"x": float, "k": str})
    flow.groupby("k").agg("sum", "x")
    assert flow.local(ROWS).records() == [{"k": "a", "sum": 4.0}, {"k": "b", "sum": 2.0}]
    for fn, value in (("count", 3), ("min", 1.0), ("max", 3.0), ("average", 2.0)):
        whole = Flow("w", {"x": float, "k": str})
        whole.agg(fn, "x")
        assert whole.local(ROWS).records() == [{fn: value}]

    def group_a(row: Row) -> bool:
        return bool(row["k"] == "a")

    grouped = Flow("g", {"x": float, "k": str})
    grouped.groupby("k").filter(group_a, group=True).agg("count", "x")
    assert grouped.local(ROWS).records() == [{"k": "a", "count": 2}]

    def first_is_big(row: Row) -> bool:  # sees each group's first row only
        return bool(row["x"] > 1.5)

    by_first = Flow("h", {"x": float, "k": str})
    by_first.groupby("k").filter(first_is_big, group=True)
    assert [r["k"] for r in by_first.local(ROWS).records()] == ["b"]


def test_agg_skips_nulls() -> None:
    flow = Flow("f", {"x": float, "k": str})
    flow.filter(big).join(flow.filter(small).map(double), how="outer").agg("average", "double")
    assert flow.local(ROWS).records() == [{"average": 3.0}]


def test_static_and_dynamic_lookups_read_stored_values() -> None:
    store = LocalServices(lookups={"weights": [1, 2], "user:a": {"age": 3}})
    flow = Flow("f", {"user": str})
    flow.lookup("weights").map(lambda_free, names=["n"])
    dyn = Flow("d", {"user": str})

    def key(row: Row) -> str:
        return "user:" + row["user"]

    dyn.map(key, names=["key"]).lookup("key", dynamic=True, name="profile")
    assert dyn.local([{"user": "a"}, {"user": "b"}], store).records() == [
        {"key": "user:a", "profile": {"age": 3}},
        {"key": "user:b", "profile": None},
    ]
    assert flow.local([{"user": "a"}], store).records() == [{"n": 2}]


def lambda_free(row: Row) -> int:
    return len(row["weights"])


def test_a_model_operator_adds_its_outputs_as_columns() -> None:
    def model(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = inputs["input-0"]
        return {"sum": batch.sum(axis=1), "probs": batch / batch.sum(axis=1, keepdims=True)}

    flow = Flow("f", {"a": float, "b": float})
    flow.map(Model("m", {"sum": float, "probs": np.ndarray}))
    table = flow.local([{"a": 1.0, "b": 3.0}], LocalServices(models={"m": model}))
    (row,) = table.records()
    assert row["a"] == 1.0 and row["sum"] == 4.0
    assert row["probs"].tolist() == [0.25, 0.75]


def test_select_combines_the_chosen_models_answers() -> None:
    def answers(label: int, confidence: float) -> Any:
        def model(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            rows = len(inputs["input-0"])
            probabilities = np.full((rows, 3), (1 - confidence) / 2)
            probabilities[:, label] = confidence
            return {"label": np.full(rows, label), "probabilities": probabilities}

        return model

    services = LocalServices(models={"a": answers(1, 0.9), "b": answers(2, 0.6)})
    fixed = Flow("f", {"x": float})
    fixed.select(["a", "b"], policy="fixed", active="b")
    assert fixed.local([1.0], services).records() == [{"x": 1.0, "output": 2, "confidence": 0.6}]
    vote = Flow("v", {"x": float})
    vote.select(["a", "b"], policy="exp4")
    (row,) = vote.local([1.0], services).records()
    assert row["output"] == 1  # equal weights: the surer model carries the vote
    assert vote.compile().stages[1].models == ("a", "b")
