"""The compiler: which chains fuse and why not, competitive clones, batching flags."""

from __future__ import annotations

import numpy as np

from headway.flows import Flow, Model, Options, Row, Table
from headway.flows.plan import ACTION, FRONTEND, SOURCE


def pre(row: Row) -> np.ndarray:
    return np.asarray(row["x"]) / 2.0


def post(row: Row) -> float:
    return float(row["output-0"])


def fmt(row: Row) -> str:
    return f"{row['post']:.2f}"


def keep(row: Row) -> bool:
    return bool(row["post"] > 0)


def slow(row: Row) -> float:
    return 1.0


def pre_all(table: Table) -> list[np.ndarray]:
    return [np.asarray(x) / 2.0 for x in table.column("x")]


MODEL = Model("m", {"output-0": float})


def chain() -> Flow:
    flow = Flow("chain", {"x": np.ndarray})
    flow.map(pre, names=["x"]).map(MODEL).map(post).map(fmt)
    return flow


def test_a_chain_around_a_model_fuses_into_one_action() -> None:
    plan = chain().compile()
    kinds = [(s.kind, s.operators) for s in plan.stages]
    assert kinds == [(SOURCE, ("source",)),
                     (ACTION, ("map:pre", "model:m", "map:post", "map:fmt"))]  # fmt: skip
    assert plan.stages[1].models == ("m",) and plan.stages[1].why == "nothing reads it"
    assert plan.edges == [(0, 1)]


def test_without_fusion_every_operator_is_its_own_stage() -> None:
    plan = chain().compile(Options(fusion=False))
    assert [s.operators for s in plan.stages[1:]] == [("map:pre",), ("model:m",), ("map:post",),
                                                      ("map:fmt",)]  # fmt: skip
    assert {s.why for s in plan.stages[1:]} == {"fusion is off"}
    assert plan.stages[2].only_model and plan.edges == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_why_chains_end() -> None:
    flow = Flow("f", {"x": np.ndarray})
    a = flow.map(pre, names=["x"])
    b = a.map(MODEL).map(post).filter(keep)  # a filter does not end a chain
    c = b.map(fmt).map(Model("m2", {"y": float}, inputs={"input-0": "fmt"}))  # a second model
    second = c.map(Model("m3", {"z": float}, inputs={"input-0": "fmt"}))  # and a third
    joined = a.join(second)  # a is read twice; the join reads two tables
    joined.lookup("k")
    plan = flow.compile()
    why = {s.operators: s.why for s in plan.stages}
    assert why[("map:pre",)] == "2 operators read it"
    assert why[("model:m", "map:post", "filter:keep", "map:fmt")] == (
        "model:m2 is a second model: each model keeps its own batching"
    )
    assert why[("model:m2",)] == "model:m3 is a second model: each model keeps its own batching"
    assert why[("model:m3",)] == "join reads several tables"
    assert why[("join",)] == why[("lookup:k",)] == "runs in the frontend"
    assert [s.kind for s in plan.stages if s.operators == ("join",)] == [FRONTEND]


def test_a_fused_stage_is_high_variance_if_a_member_is_and_batches_only_if_all_do() -> None:
    flow = Flow("f", {"x": np.ndarray})
    flow.map(pre_all, names=["x"], batching=True).map(MODEL).map(slow, high_variance=True)
    stage = flow.compile().stages[1]
    assert stage.high_variance and stage.replicas == 2 and not stage.batching
    assert flow.compile(Options(compete_replicas=3)).stages[1].replicas == 3
    assert flow.compile(Options(compete=False)).stages[1].replicas == 1
    all_batch = Flow("g", {"x": np.ndarray})
    all_batch.map(pre_all, names=["x"], batching=True).map(MODEL)
    assert all_batch.compile().stages[1].batching
    assert not all_batch.compile(Options(batching=False)).stages[1].batching


def test_a_stage_that_may_read_null_arrays_does_not_batch() -> None:
    """A row of NULLs from a left join's right side has no array shape to batch with."""
    flow = Flow("f", {"x": np.ndarray})
    scored = flow.map(MODEL)
    arrays = flow.map(pre, names=["y"], batching=False)
    joined = scored.join(arrays, how="left")
    joined.map(pre_all, names=["z"], batching=True)
    last = flow.compile().stages[-1]
    assert last.operators == ("map:pre_all",) and not last.batching
    inner = Flow("g", {"x": np.ndarray})
    inner.map(MODEL).join(inner.map(pre, names=["y"]), how="inner").map(
        pre_all, names=["z"], batching=True
    )
    assert inner.compile().stages[-1].batching
