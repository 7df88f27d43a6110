"""Building a flow type-checks each operator; errors name the operator and the column."""

from __future__ import annotations

import numpy as np
import pytest

from headway.errors import InvalidInput
from headway.flows import Flow, FlowError, Model, Row


def score(row: Row) -> float:
    return float(row["x"]) * 2.0


def split(row: Row) -> tuple[int, str]:
    return int(row["x"]), str(row["x"])


def unannotated(row):  # type: ignore[no-untyped-def]
    return row["x"]


def positive(row: Row) -> bool:
    return bool(row["x"] > 0)


def test_a_map_takes_its_columns_from_the_annotation_and_names() -> None:
    flow = Flow("f", {"x": float})
    node = flow.map(split, names=["whole", "text"])
    assert node.schema.describe() == [["whole", "int"], ["text", "str"]]
    assert flow.map(score).schema.names == ["score"]
    assert flow.map(score, col="x").schema.describe() == [["x", "float"]]


def test_an_unannotated_function_is_a_build_error_naming_the_operator() -> None:
    flow = Flow("f", {"x": float})
    with pytest.raises(FlowError, match=r"operator 'map:unannotated'.*no return annotation"):
        flow.map(unannotated)


def test_names_must_match_the_annotation() -> None:
    with pytest.raises(FlowError, match=r"map:split.*names \['a'\] has 1 column.*declares 2"):
        Flow("f", {"x": float}).map(split, names=["a"])


def test_a_wrong_column_name_is_a_build_error_naming_the_column() -> None:
    flow = Flow("f", {"x": float})
    with pytest.raises(FlowError, match=r"operator 'map:score'.*col 'y' is not a column"):
        flow.map(score, col="y")
    with pytest.raises(FlowError, match=r"operator 'groupby'.*'nope' is not a column"):
        flow.groupby("nope")
    with pytest.raises(FlowError, match=r"operator 'model:m'.*input column 'z'"):
        flow.map(Model("m", {"output-0": float}, inputs={"input-0": "z"}))


def test_agg_of_a_non_numeric_column_is_a_build_error() -> None:
    flow = Flow("f", {"x": float, "name": str})
    with pytest.raises(FlowError, match=r"agg:sum\(name\).*'name' is str, not numeric"):
        flow.agg("sum", "name")
    assert flow.agg("count", "name").schema.describe() == [["count", "int"]]


def test_a_right_join_is_a_build_error() -> None:
    flow = Flow("f", {"x": float})
    with pytest.raises(FlowError, match=r"operator 'join'.*not 'right'.*swap the two tables"):
        flow.join(flow.map(score), how="right")


def test_a_flow_with_two_sinks_is_an_error() -> None:
    flow = Flow("f", {"x": float})
    flow.map(score)
    flow.filter(positive)
    with pytest.raises(
        FlowError, match=r"exactly one sink; it has \['map:score', 'filter:positive'\]"
    ):
        flow.compile()


def test_union_needs_equal_schemas_and_tables_of_one_flow() -> None:
    flow = Flow("f", {"x": float})
    with pytest.raises(FlowError, match="inputs differ in schema"):
        flow.union(flow.map(score))
    other = Flow("g", {"x": float})
    with pytest.raises(FlowError, match="must come from this flow"):
        flow.union(other)


def test_a_filter_must_return_bool_and_group_filters_need_a_groupby() -> None:
    flow = Flow("f", {"x": float})
    with pytest.raises(FlowError, match=r"filter:score.*'-> bool'"):
        flow.filter(score)  # type: ignore[arg-type]
    with pytest.raises(FlowError, match=r"filter\(group=True\) needs a table grouped"):
        flow.filter(positive, group=True)


def test_a_grouped_table_takes_only_map_filter_and_agg() -> None:
    grouped = Flow("f", {"k": str, "x": float}).groupby("k")
    with pytest.raises(FlowError, match="grouped by 'k'"):
        grouped.join(grouped)


def test_operators_get_unique_labels() -> None:
    flow = Flow("f", {"x": float})
    assert flow.map(score).map(score, col="score").label == "map:score#2"


def test_input_rows_are_checked_when_run() -> None:
    flow = Flow("f", {"x": float, "v": np.ndarray})
    with pytest.raises(
        InvalidInput, match=r"row 0 must have columns \['x', 'v'\]; missing \['v'\]"
    ):
        flow.local([{"x": 1.0}])
    with pytest.raises(InvalidInput, match=r"column 'x': expected float, got str"):
        flow.local([{"x": "a", "v": [1, 2]}])
    table = flow.local([{"x": 1, "v": [1, 2]}])
    assert table.rows[0][0] == 1.0 and isinstance(table.rows[0][1], np.ndarray)


def test_a_function_whose_output_breaks_its_annotation_fails_when_run() -> None:
    def lies(row: Row) -> int:
        return "three"  # type: ignore[return-value]

    from headway.errors import ModelError

    with pytest.raises(ModelError, match=r"map:lies.*column 'lies': expected int, got str"):
        Flow("f", {"x": float}).map(lies).flow.local([1.0])  # type: ignore[attr-defined]
