"""`headway bench` against a real tiny OIP server on loopback (see conftest.py).

Counts must match the server's own counts exactly. Open-loop timing tolerance: a constant
200 req/s schedule sends exactly its 400 requests in 2 s, and 99% of them leave within
``LATENESS_P99_MS`` of their scheduled time (the event loop's timers have 1 ms resolution; the
rest is margin). A busy shared machine can stall any process for tens of milliseconds, so that
one timing bound gets three tries; the counts are checked exactly on every try.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from headway.cli.bench import bench
from headway.loadgen.arrivals import schedule
from headway.loadgen.workload import WorkloadError, encode, from_metadata

if TYPE_CHECKING:
    from conftest import OipServer

LATENESS_P99_MS = 5.0


def run_bench(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(bench, [*args, "--json"])
    assert result.exit_code == 0, result.output
    figures: dict[str, Any] = orjson.loads(result.stdout)
    # Every request in the window is accounted for exactly once.
    assert figures["requests"] == (
        figures["answered"] + figures["transport_errors"] + figures["timeouts"] + figures["expired"]
    )
    assert figures["answered"] == figures["ok"] + figures["rejected"] + figures["errors"]
    return figures


def closed(oip: OipServer, model: str, *args: str, duration: str = "0.5") -> dict[str, Any]:
    return run_bench(
        "--url",
        oip.url,
        "--model",
        model,
        "--concurrency",
        "4",
        "--duration",
        duration,
        "--warmup",
        "0",
        *args,
    )


@pytest.mark.integration
def test_every_fifth_rejected_is_counted_exactly(oip: OipServer) -> None:
    figures = closed(oip, "every5", duration="1")
    n = oip.stats("every5")["requests"]
    assert n > 100
    assert figures["requests"] == figures["answered"] == n
    assert figures["rejected"] == n // 5
    assert figures["ok"] == n - n // 5
    assert figures["errors"] == figures["transport_errors"] == figures["timeouts"] == 0
    assert figures["status_counts"] == {"200": n - n // 5, "503": n // 5}
    assert figures["throughput_rps"] == pytest.approx(figures["ok"] / 1.0)
    answered = figures["rejection_latency_ms"]  # how fast the 503s came, apart from the 200s
    assert 0 < answered["min"] <= answered["p50"] <= answered["p99"] <= answered["max"]


@pytest.mark.integration
def test_mixed_statuses_split_into_rejections_and_errors(oip: OipServer) -> None:
    figures = closed(oip, "mixed")
    n = oip.stats("mixed")["requests"]
    codes = [
        503 if i % 5 == 0 else 500 if i % 7 == 0 else 429 if i % 11 == 0 else 200
        for i in range(1, n + 1)
    ]
    assert figures["requests"] == n
    assert figures["ok"] == codes.count(200)
    assert figures["rejected"] == codes.count(503) + codes.count(429)
    assert figures["errors"] == codes.count(500)
    assert figures["status_counts"] == {str(c): codes.count(c) for c in sorted(set(codes))}


@pytest.mark.integration
def test_warmup_requests_are_sent_but_not_counted(oip: OipServer) -> None:
    figures = run_bench(
        "--url",
        oip.url,
        "--model",
        "m",
        "--concurrency",
        "2",
        "--duration",
        "0.5",
        "--warmup",
        "0.5",
    )
    stats = oip.stats("m")
    assert figures["sent_total"] == stats["requests"]
    assert 0 < figures["requests"] < stats["requests"]
    assert figures["ok"] == figures["requests"]


@pytest.mark.integration
def test_open_loop_sends_exactly_on_schedule(oip: OipServer) -> None:
    lateness = []
    for _ in range(3):  # counts must be exact every time; the timing bound, one try in three
        oip.reset()
        figures = run_bench(
            "--url",
            oip.url,
            "--model",
            "m",
            "--rate",
            "200",
            "--arrival",
            "constant",
            "--duration",
            "2",
            "--warmup",
            "0",
        )
        assert figures["requests"] == figures["ok"] == 400
        assert oip.stats("m")["requests"] == 400
        assert figures["throughput_rps"] == 200
        assert figures["capped"] == 0
        lateness.append(figures["send_lateness_ms"]["p99"])
        if lateness[-1] < LATENESS_P99_MS:
            break
    assert min(lateness) < LATENESS_P99_MS, lateness


@pytest.mark.integration
def test_open_loop_poisson_follows_the_seeded_schedule(oip: OipServer) -> None:
    figures = run_bench(
        "--url",
        oip.url,
        "--model",
        "m",
        "--rate",
        "300",
        "--seed",
        "3",
        "--duration",
        "1",
        "--warmup",
        "0",
    )
    expected = len(schedule(300, 1.0, "poisson", None, seed=3))
    assert figures["requests"] == figures["ok"] == oip.stats("m")["requests"] == expected
    assert figures["arrival"] == "poisson"


@pytest.mark.integration
def test_open_loop_opens_connections_for_a_slow_server(oip: OipServer) -> None:
    # 20 ms per answer at 1000 req/s: about 20 requests in flight, each on its own connection.
    figures = run_bench(
        "--url",
        oip.url,
        "--model",
        "slow",
        "--rate",
        "1000",
        "--arrival",
        "constant",
        "--duration",
        "1",
        "--warmup",
        "0",
    )
    assert figures["ok"] == figures["requests"] == 1000
    assert figures["peak_connections"] >= 20
    assert figures["capped"] == 0
    assert figures["latency_ms"]["p50"] >= 20


def capped_at_two(oip: OipServer, *args: str) -> dict[str, Any]:
    """`slow` (20 ms a request) at 200 req/s for 1 s on at most two connections, which serve
    100 req/s: half the requests wait in the client for a connection."""
    return run_bench(
        "--url", oip.url, "--model", "slow", "--rate", "200", "--arrival", "constant",
        "--duration", "1", "--warmup", "0", "--max-connections", "2", *args,
    )  # fmt: skip


@pytest.mark.integration
def test_connection_cap_delays_sends_but_latency_counts_from_the_schedule(oip: OipServer) -> None:
    # Two connections at 20 ms each serve 100 req/s; 200 are scheduled in the first second.
    figures = capped_at_two(oip)
    assert figures["ok"] == figures["requests"] == 200
    assert figures["peak_connections"] == 2
    assert figures["capped"] >= 150
    # The last request was due at ~1 s and answered at ~2 s: no coordinated omission.
    assert figures["latency_ms"]["max"] >= 800
    assert figures["send_lateness_ms"]["max"] >= 800
    # The waits for a connection at the cap are the server's doing, not the generator's own
    # lateness, which counts until it got to each request.
    assert figures["own_send_lateness_ms"]["max"] < figures["send_lateness_ms"]["max"]


@pytest.mark.integration
def test_a_propagated_deadline_sends_the_time_left_and_not_what_expired(oip: OipServer) -> None:
    # As above, half the requests wait in the client; with --propagate-deadline one sent late
    # carries the milliseconds it has left, and one that waited 50 ms is never sent.
    figures = capped_at_two(oip, "--slo-ms", "50", "--propagate-deadline")
    stats = oip.stats("slow")
    assert figures["expired"] >= 50
    assert stats["requests"] == figures["answered"] == 200 - figures["expired"]
    left = [float(slo) for slo, n in stats["slo_ms"].items() for _ in range(n)]
    assert len(left) == stats["requests"]
    assert all(0 < v <= 50 for v in left)
    assert sum(v < 49 for v in left) >= 10  # sent late, with less than the whole SLO


def test_propagating_a_deadline_needs_an_open_loop_with_an_slo(oip: OipServer) -> None:
    for args in (["--rate", "10"], ["--concurrency", "1", "--slo-ms", "50"]):
        result = CliRunner().invoke(
            bench, ["--url", oip.url, "--model", "m", "--propagate-deadline", *args]
        )
        assert result.exit_code == 2
        assert "--propagate-deadline needs an open loop" in result.output


@pytest.mark.integration
def test_binary_batches(oip: OipServer) -> None:
    figures = closed(oip, "m", "--binary", "--batch", "3")
    stats = oip.stats("m")
    assert figures["ok"] == stats["requests"] == stats["binary"] > 0
    assert stats["rows"] == 3 * stats["requests"]
    assert figures["batch"] == 3 and figures["binary"] is True


@pytest.mark.integration
@pytest.mark.parametrize("binary", [False, True])
def test_input_data_files(oip: OipServer, tmp_path: Path, binary: bool) -> None:
    flag = ["--binary"] if binary else []
    full = tmp_path / "full.json"
    full.write_bytes(
        orjson.dumps(
            {
                "id": "r1",
                "inputs": [
                    {
                        "name": "x",
                        "shape": [2, 4],
                        "datatype": "FP32",
                        "data": [[0.5] * 4, [1.5] * 4],
                    }
                ],
            }
        )
    )
    figures = closed(oip, "m", "--input-data", str(full), *flag)
    stats = oip.stats("m")
    assert figures["ok"] == stats["requests"] > 0 and stats["rows"] == 2 * stats["requests"]

    named = tmp_path / "named.json"
    named.write_bytes(orjson.dumps({"inputs": {"x": [[1.0, 2.0, 3.0, 4.0]] * 5}}))
    oip.reset()
    figures = closed(oip, "m", "--input-data", str(named), "--batch", "2", *flag)
    stats = oip.stats("m")
    assert figures["ok"] == stats["requests"] > 0 and stats["rows"] == 2 * stats["requests"]
    assert figures["variants"] == 3  # windows of 2 rows over 5 rows, wrapping

    rows = tmp_path / "rows.npy"
    np.save(rows, np.arange(40, dtype=np.float64).reshape(10, 4))
    oip.reset()
    figures = closed(oip, "m", "--input-data", str(rows), "--batch", "4", *flag)
    stats = oip.stats("m")
    assert figures["ok"] == stats["requests"] > 0 and stats["rows"] == 4 * stats["requests"]


@pytest.mark.integration
@pytest.mark.parametrize("load", [["--concurrency", "4"], ["--rate", "500"]])
def test_closed_connections_and_dropped_requests(oip: OipServer, load: list[str]) -> None:
    args = ["--url", oip.url, *load, "--duration", "0.5", "--warmup", "0"]
    figures = run_bench(*args, "--model", "close")
    assert figures["ok"] == figures["requests"] == oip.stats("close")["requests"] > 10
    assert figures["transport_errors"] == 0

    figures = run_bench(*args, "--model", "drop")
    stats = oip.stats("drop")
    assert stats["dropped"] > 0
    assert figures["transport_errors"] == stats["dropped"]
    assert figures["ok"] == stats["requests"] - stats["dropped"]
    assert figures["requests"] == stats["requests"]


@pytest.mark.integration
def test_unanswered_requests_time_out(oip: OipServer) -> None:
    figures = closed(oip, "stall", "--timeout", "0.3", duration="0.3")
    assert figures["timeouts"] == 4
    assert figures["ok"] == 0


@pytest.mark.integration
def test_the_slo_is_sent_to_the_server_as_a_parameter(oip: OipServer) -> None:
    figures = closed(oip, "m", "--slo-ms", "50")
    assert oip.stats("m")["slo_ms"] == {"50.0": figures["requests"]}
    oip.reset()
    figures = closed(oip, "m", "--binary")  # no --slo-ms: the server's own
    assert oip.stats("m")["slo_ms"] == {"none": figures["requests"]}


@pytest.mark.integration
def test_goodput_counts_answers_within_the_slo(oip: OipServer) -> None:
    tight = closed(oip, "slow", "--slo-ms", "5")
    assert tight["ok"] > 0 and tight["goodput_rps"] == 0 and tight["slo_attainment"] == 0
    loose = closed(oip, "slow", "--slo-ms", "5000")
    assert loose["goodput_rps"] == loose["throughput_rps"] > 0
    assert loose["slo_attainment"] == 1.0


@pytest.mark.integration
def test_find_rate_brackets_a_servers_capacity_under_its_slo(oip: OipServer) -> None:
    """`serial` answers one request at a time, 10 ms each: at most 100 answers a second. A
    trial's requests arrive in its 2 s window and count as good only if answered 200 ms after
    it at the latest, so no trial gets more than 100 * 2.2 good answers, and none offering more
    than 100 * 2.2 / (0.9 * 2) req/s can pass; at half the capacity its queue stays far
    within the 200 ms SLO."""
    args = ["--url", oip.url, "--model", "serial", "--slo-ms", "200", "--find-rate"]
    args += ["--duration", "2", "--warmup", "0.5", "--trials", "5", "--json"]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output
    found = orjson.loads(result.stdout)
    trials = found["trials"]
    assert 1 <= len(trials) <= 5
    # the first trial starts at the closed loop's throughput, itself at most the capacity
    assert 0 < found["closed_loop"]["throughput_rps"] <= 101
    assert trials[0]["rate"] == found["start_rps"] == found["closed_loop"]["throughput_rps"]
    for trial in trials:  # every verdict is the one its own figures call for
        assert trial["slo_ms"] == 200.0
        in_time = trial["slo_attainment"] >= 0.9
        on_time = trial["own_send_lateness_ms"]["p99"] <= 20.0
        assert (trial["verdict"] == "passed") == (in_time and on_time), trial
        assert trial["goodput_rps"] <= 110  # as the capacity bounds what any trial got
        assert trial["offered_rps"] == round(trial["requests"] / 2, 2)
    sustained = found["sustained_rps"]
    assert sustained is not None and 40 <= sustained <= 100 * 2.2 / (0.9 * 2)
    assert any(t["offered_rps"] == sustained and t["verdict"] == "passed" for t in trials)
    assert found["failed_rps"] is None or found["failed_rps"] > sustained
    assert found["limited_by"] in {"server", "generator", "trials"}
    assert oip.stats("serial")["slo_ms"] == {"200.0": oip.stats("serial")["requests"]}

    table = CliRunner().invoke(bench, [*args[:-1], "--trials", "1"])
    assert table.exit_code == 0, table.output
    assert "Sustained" in table.stdout or "No rate sustained" in table.stdout
    assert "trial 1/1" in table.stderr


@pytest.mark.integration
def test_find_rate_says_why_a_server_that_never_answers_gives_no_rate(oip: OipServer) -> None:
    base = ["--url", oip.url, "--model", "stall", "--slo-ms", "50", "--find-rate"]
    base += ["--duration", "0.3", "--warmup", "0", "--timeout", "0.3"]
    result = CliRunner().invoke(bench, base)
    assert result.exit_code == 1
    assert "no 200 answers" in result.output and "give --rate" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(bench, [*base, "--rate", "8", "--trials", "2"])
    assert result.exit_code == 0, result.output
    assert "No rate sustained: down to 4.0 req/s" in " ".join(result.stdout.split())


@pytest.mark.integration
def test_table_output(oip: OipServer) -> None:
    result = CliRunner().invoke(
        bench,
        [
            "--url",
            oip.url,
            "--model",
            "every5",
            "--concurrency",
            "2",
            "--duration",
            "0.3",
            "--warmup",
            "0",
            "--progress",
        ],
    )
    assert result.exit_code == 0, result.output
    for word in ("throughput", "goodput", "rejected", "p99.9", "503", "rejections answered"):
        assert word in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "2", "--rate", "10"], "not both"),
        (["--rate", "0"], "greater than 0"),
        (["--rate", "-3"], "greater than 0"),
        (["--rate", "inf"], "finite"),
        (["--duration", "nan"], "finite"),
        (["--rate", "10", "--arrival", "weibull"], "'--arrival'"),
        (["--rate", "10", "--cv", "2"], "--cv only applies to --arrival gamma"),
        (["--rate", "10", "--arrival", "gamma"], "needs --cv"),
        (["--concurrency", "2", "--arrival", "poisson"], "need --rate"),
        (["--concurrency", "0"], "'--concurrency'"),
        (["--batch", "0"], "'--batch'"),
        (["--url", "ftp://example.com"], "is not an http(s)://host[:port] URL"),
        (["--find-rate"], "give --slo-ms"),
        (["--find-rate", "--slo-ms", "50", "--concurrency", "2", "--rate", "9"], "not both"),
        (["--find-rate", "--slo-ms", "50", "--trials", "0"], "'--trials'"),
        (["--rate", "10", "--trials", "3"], "needs --find-rate"),
    ],
)
def test_bad_arguments_are_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(bench, ["--model", "m", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.integration
def test_unreachable_server_and_unknown_model(oip: OipServer, closed_port: int) -> None:
    result = CliRunner().invoke(bench, ["--url", f"http://127.0.0.1:{closed_port}", "--model", "m"])
    assert result.exit_code == 1
    assert "cannot reach" in result.output and "--url" in result.output
    result = CliRunner().invoke(bench, ["--url", oip.url, "--model", "nope"])
    assert result.exit_code == 1
    assert "model 'nope' not found" in result.output and "--model" in result.output
    assert "Traceback" not in result.output


@pytest.mark.integration
def test_runs_standalone(oip: OipServer) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "headway.cli.bench",
            "--url",
            oip.url,
            "--model",
            "m",
            "--duration",
            "0.2",
            "--warmup",
            "0",
            "--json",
        ],
        capture_output=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")},
    )
    assert orjson.loads(out.stdout)["ok"] > 0


METADATA = {
    "name": "multi",
    "inputs": [
        {"name": "half", "datatype": "FP16", "shape": [-1, 3]},
        {"name": "text", "datatype": "BYTES", "shape": [-1]},
        {"name": "flag", "datatype": "BOOL", "shape": [-1, 2]},
        {"name": "ids", "datatype": "INT64", "shape": [-1, -1]},
        {"name": "brain", "datatype": "BF16", "shape": [-1, 2]},
    ],
}


def test_bodies_from_metadata_match_every_datatype_and_shape() -> None:
    requests = from_metadata(METADATA, batch=2, variants=3, seed=5)
    assert len(requests) == 3
    plain = orjson.loads(encode(requests[0]).payload)
    shapes = {t["name"]: t["shape"] for t in plain["inputs"]}
    assert shapes == {"half": [2, 3], "text": [2], "flag": [2, 2], "ids": [2, 1], "brain": [2, 2]}
    for t in plain["inputs"]:
        assert len(t["data"]) == int(np.prod(t["shape"]))
    assert encode(requests[0]).payload != encode(requests[1]).payload  # distinct variants

    binary = encode(requests[0], binary=True)
    assert binary.header_length is not None
    header = orjson.loads(binary.payload[: binary.header_length])
    sizes = {t["name"]: t["parameters"]["binary_data_size"] for t in header["inputs"]}
    assert sizes["half"] == 12 and sizes["flag"] == 4 and sizes["ids"] == 16 and sizes["brain"] == 8
    assert binary.header_length + sum(sizes.values()) == len(binary.payload)
    assert all("data" not in t for t in header["inputs"])


def test_a_fixed_first_dimension_cannot_be_batched() -> None:
    fixed = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4]}]}
    body = orjson.loads(encode(from_metadata(fixed, None, 1)[0]).payload)
    assert body["inputs"][0]["shape"] == [1, 4]
    with pytest.raises(WorkloadError, match="fixed first dimension 1; --batch must be 1"):
        from_metadata(fixed, 8, 1)
