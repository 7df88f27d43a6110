"""OpenTelemetry: an inference with a W3C traceparent is exported, to an in-memory exporter,
as a server span in the caller's trace with its decode, queue, worker action and encode
children; without OTEL_TRACES_EXPORTER tracing is off."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import httpx
import orjson
import pytest

from headway.api import tracing
from headway.api.http import HttpServer
from headway.cli.serve import ServeSettings, build_app
from tests.integration import models

pytestmark = pytest.mark.integration

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
BODY = orjson.dumps(
    {"inputs": [{"name": "input-0", "shape": [2, 4], "datatype": "FP32", "data": [1] * 8}]}
)


def test_an_inference_is_traced_in_the_callers_trace(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    models.python_model(tmp_path / "repo", "doubler", "Doubler")
    settings = ServeSettings(
        repository=tmp_path / "repo", state=tmp_path / "s.db", workers=1, port=0, grpc_port=0
    )
    exporter = InMemorySpanExporter()
    app = build_app(settings)
    app.tracing = tracing.from_environment(exporter)
    app.controller.tracing = True

    async def scenario() -> list[int]:
        server = HttpServer(app, port=0)
        await server.start()
        statuses = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            for _ in range(300):  # ready: loaded, warmed up, its batch sizes measured
                if (await client.get("/v2/health/ready")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
            for body in (BODY, b"{not json"):
                answer = await client.post(
                    "/v2/models/doubler/infer",
                    content=body,
                    headers={"traceparent": f"00-{TRACE_ID}-{PARENT}-01"},
                )
                statuses.append(answer.status_code)
        await server.stop()
        return statuses

    assert asyncio.run(scenario()) == [200, 400]
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "infer doubler"]
    assert len(roots) == 2
    for root in roots:
        assert format(root.context.trace_id, "032x") == TRACE_ID
        assert format(root.parent.span_id, "016x") == PARENT
    answered, refused = roots
    assert answered.attributes["http.response.status_code"] == 200
    assert refused.attributes["http.response.status_code"] == 400
    children = {
        s.name: s for s in spans if s.parent and s.parent.span_id == answered.context.span_id
    }
    assert set(children) == {"decode", "queue", "worker action", "encode"}
    assert children["worker action"].attributes["batch.rows"] == 2
    order = [children[n] for n in ("decode", "queue", "worker action", "encode")]
    for before, after in itertools.pairwise(order):
        assert before.end_time <= after.start_time + 1_000, (before.name, after.name)
    assert answered.start_time <= order[0].start_time
    assert order[-1].end_time <= answered.end_time


def test_tracing_is_off_without_an_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    assert tracing.from_environment() is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing.from_environment() is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
    with pytest.raises(Exception, match="knows console, otlp and none"):
        tracing.from_environment()
