"""`headway bench --stream` against a live server and a generative text model: closed and
open loop, over OpenAI's completions and Triton's generate_stream; every stream accounted for,
its parts counted as the model made them, and a stream that breaks counted with its cause."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from headway.cli.bench import bench
from headway.launcher import ServerProcess
from tests.integration.text_models import spell

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = spell(tmp_path_factory.mktemp("repository"))
    tmp = tmp_path_factory.mktemp("state")
    with ServerProcess(root, state=tmp / "state.db", workers=1, log=tmp / "server.log") as srv:
        yield srv


def streams(server: ServerProcess, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        bench,
        ["--url", server.url, "--model", "spell", "--stream", "--warmup", "0",
         "--duration", "1", "--json", *args],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    figures: dict[str, Any] = orjson.loads(result.stdout)
    assert figures["requests"] == figures["completed"] + figures["rejected"] + figures["failed"]
    return figures


def test_a_closed_loop_of_openai_streams_reports_each_streams_parts_and_times(
    server: ServerProcess,
) -> None:
    figures = streams(server, "--concurrency", "2", "--prompt", "repeat 5", "--max-tokens", "5",
                      "--ttft-ms", "60000", "--tpot-ms", "60000")  # fmt: skip
    assert figures["requests"] >= 2 and figures["completed"] == figures["requests"]
    assert figures["parts_per_request"] == 5.0
    assert figures["parts"] == 5 * figures["requests"]
    assert figures["ttft_ms"]["p50"] > 0 and figures["tpot_ms"]["p50"] is not None
    assert figures["slo_attainment"] == 1.0  # targets no busy machine misses


def test_an_open_loop_over_generate_stream(server: ServerProcess) -> None:
    figures = streams(server, "--api", "generate", "--rate", "8", "--prompt", "one two three")
    assert figures["mode"] == "open" and figures["requests"] >= 4
    assert figures["completed"] == figures["requests"] and figures["parts_per_request"] == 3.0


def test_a_stream_that_breaks_is_a_failure_named_by_its_error_event(
    server: ServerProcess,
) -> None:
    figures = streams(server, "--concurrency", "1", "--prompt", "fail a b c d")
    assert figures["failed"] == figures["requests"] >= 1 and figures["completed"] == 0
    assert figures["parts_per_request"] == 2.0  # the two words before the model raised
    assert any("the spell broke at its third word" in error for error in figures["errors"])


def test_stream_options_without_stream_are_refused() -> None:
    result = CliRunner().invoke(bench, ["--model", "spell", "--prompt", "hi"])
    assert result.exit_code == 2 and "add --stream" in result.output


def test_find_rate_searches_for_the_goodput_under_both_targets(server: ServerProcess) -> None:
    result = CliRunner().invoke(
        bench,
        ["--url", server.url, "--model", "spell", "--stream", "--warmup", "0", "--duration", "1",
         "--prompt", "repeat 3", "--find-rate", "--trials", "2", "--ttft-ms", "60000",
         "--concurrency", "2", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    figures = orjson.loads(result.stdout)
    assert figures["mode"] == "find-rate" and figures["closed_loop"]["completed"] >= 1
    assert [trial["verdict"] for trial in figures["trials"]] == ["passed", "passed"]
    assert figures["goodput_rps"] > 0 and figures["at_goodput"]["slo_attainment"] >= 0.9
    assert figures["limited_by"] == "trials"
    without = CliRunner().invoke(bench, ["--url", server.url, "--model", "spell", "--stream",
                                         "--find-rate"])  # fmt: skip
    assert without.exit_code == 2 and "--ttft-ms" in without.output
