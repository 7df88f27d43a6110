"""Every example flow answers alike with each optimisation on or off, in-process and through
the worker's stage adapter (the rows as tensors, the chain run as one action)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from tests.flows.examples import EXAMPLES, NAMES, flow, inputs, models, module, same

from headway.adapters.flow_adapter import FlowStageAdapter
from headway.errors import ConfigError
from headway.flows import Flow, LocalServices, Options
from headway.flows.local import filter_ahead, run_action, run_plan
from headway.flows.operators import select_rows
from headway.flows.plan import ACTION
from headway.flows.tensors import KEEP, TIMES, from_tensors, to_tensors

SWITCHES = [Options(fusion=f, compete=c, batching=b)
            for f, c, b in itertools.product((True, False), repeat=3)]  # fmt: skip


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("flow-models")
    models.build(root)
    return root


@pytest.fixture(scope="module")
def services(repository: Path) -> LocalServices:
    return LocalServices(lookups=models.lookups(), repository=repository)


def brief(name: str) -> Flow:
    """The example's flow, with the heavy tail's sleeps a tenth as long (same shape, same cap):
    what it answers does not depend on them, and the test below runs it 108 times."""
    loaded = module(name)
    if name == "heavy_tail":
        loaded.SCALE_S /= 10
    found = loaded.flow
    assert isinstance(found, Flow)
    return found


@pytest.mark.parametrize("name", NAMES)
def test_each_optimisation_on_or_off_gives_the_same_answers(
    name: str, services: LocalServices
) -> None:
    example = brief(name)
    rows = inputs(name, 12)
    reference = [example.local([row], services).records() for row in rows]
    assert all(reference), "every example answers every input with at least one row"
    for options in SWITCHES:
        plan = example.compile(options)
        got = [run_plan(plan, example.table([row]), services).records() for row in rows]
        assert same(got, reference), options


def test_the_cascade_sends_only_unsure_rows_to_the_slow_model(services: LocalServices) -> None:
    example = flow("cascade")
    rows = models.queries()[:60]
    fast = services.predict("digits-fast", {"input-0": rows})["probabilities"].max(axis=1)
    answers = [example.local([row], services).records()[0] for row in rows]
    assert {a["model"] for a in answers} == {"digits-fast", "digits-slow"}
    for answer, confidence in zip(answers, fast, strict=True):
        if answer["model"] == "digits-slow":  # unsure, and the slow model is surer
            assert confidence < 0.85 and answer["confidence"] > confidence
        else:
            assert answer["confidence"] == pytest.approx(confidence)


@pytest.mark.parametrize("name", NAMES)
def test_a_stage_run_as_a_worker_action_answers_as_in_process(
    name: str, repository: Path, services: LocalServices
) -> None:
    """Each action stage through FlowStageAdapter (tensors in, tensors out) equals the stage
    run in-process, on the table that reaches it: the adapter gets what the frontend sends,
    the rows its leading filters kept (`filter_ahead`), and runs the rest of the chain."""
    example = flow(name)
    plan = example.compile()
    table = example.table(inputs(name, 6))
    tables = {0: table}
    from headway.flows.local import run_stage

    for stage in plan.stages[1:]:
        upstream = [tables[i] for i in stage.inputs]
        expected = run_stage(plan, stage, upstream, services)
        tables[stage.id] = expected
        if stage.kind != ACTION:
            continue
        sent, ahead = filter_ahead(plan.ops(stage), upstream[0])
        if not sent.rows or len(ahead) == len(stage.nodes):
            continue  # not dispatched: nothing left to send, or to run
        wires = {}
        for key in stage.models:
            from headway.repository import Repository

            wires[key] = Repository.scan(repository).get(key).to_wire()
        adapter = FlowStageAdapter({
            "name": "stage", "version": 1, "path": str(EXAMPLES), "framework": "flow",
            "options": {"flow": f"{EXAMPLES / (name + '.py')}:flow", "stage": stage.id,
                        "compiler": {}, "models": wires},
        })  # fmt: skip
        adapter.load()
        changed = FlowStageAdapter({**adapter.config, "options": {
            **adapter.options, "operators": ["map:something-else"]}})  # fmt: skip
        with pytest.raises(ConfigError, match="the flow file changed since the app was deployed"):
            changed.load()
        outputs = adapter.predict(to_tensors(sent, stage.name))
        assert outputs[TIMES].shape == (len(sent), len(stage.nodes) - len(ahead))
        last = example.nodes[stage.nodes[-1]].shape
        got = from_tensors(last.schema, outputs, sent.qids)
        if KEEP in outputs:
            got = select_rows(got, outputs[KEEP].tolist())
        assert got.qids == expected.qids
        assert same(got.records(), expected.records()), stage.name
        assert same(
            run_action(plan.ops(stage), upstream[0], services).records(), expected.records()
        )


def test_tables_travel_as_tensors_with_nulls_strings_and_values() -> None:
    from headway.flows.types import Schema, Table

    schema = Schema([("i", int), ("f", float), ("s", str), ("b", bytes), ("a", np.ndarray),
                     ("o", object), ("t", bool)])  # fmt: skip
    table = Table.build(schema, [
        (1, 0.5, "é", b"\x00x", [1.0, 2.0], {"k": [1, 2]}, True),
        (None, None, None, None, None, None, None),
    ])  # fmt: skip
    back = from_tensors(schema, to_tensors(table, "t"), table.qids)
    assert same(back.records(), table.records())
    assert back.records()[1] == dict.fromkeys(schema.names)


def test_the_rows_of_any_two_queries_batch_together_nulls_or_not() -> None:
    """The controller concatenates the tensors of the requests it batches: a query with NULLs
    and one without must carry the same tensors, of the same shapes past the first."""
    from headway.flows.types import Schema, Table

    schema = Schema([("label", int), ("name", str), ("a", np.ndarray)])
    with_nulls = to_tensors(Table.build(schema, [(None, None, [1.0, 2.0])]), "t")
    without = to_tensors(Table.build(schema, [(1, "x", [3.0, 4.0]), (2, "y", [5.0, 6.0])]), "t")
    assert with_nulls.keys() == without.keys()
    batch = {k: np.concatenate([with_nulls[k], without[k]]) for k in without}
    back = from_tensors(schema, batch, (0, 1, 2))
    assert same(back.records()[0], {"label": None, "name": None, "a": [1.0, 2.0]})
