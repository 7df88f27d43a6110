"""OpenTelemetry: an inference with a W3C traceparent, over REST or gRPC, is exported, to an
in-memory exporter, as a server span in the caller's trace with its decode, queue, worker
action and encode children; a flow application's query as a server span with a child per
stage it ran; without OTEL_TRACES_EXPORTER tracing is off."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import httpx
import orjson
import pytest

from headway.api import tracing
from headway.api.grpc import messages
from headway.api.http import HttpServer
from headway.cli.serve import ServeSettings, build_app
from headway.launcher import free_port
from tests.integration import models

pytestmark = pytest.mark.integration

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
BODY = orjson.dumps(
    {"inputs": [{"name": "input-0", "shape": [2, 4], "datatype": "FP32", "data": [1] * 8}]}
)


async def ready(client: httpx.AsyncClient) -> None:
    """Until the server is ready: its models loaded, warmed up, their batch sizes measured."""
    for _ in range(300):
        if (await client.get("/v2/health/ready")).status_code == 200:
            return
        await asyncio.sleep(0.05)


def test_an_inference_is_traced_in_the_callers_trace(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    models.python_model(tmp_path / "repo", "doubler", "Doubler")
    settings = ServeSettings(
        repository=tmp_path / "repo", state=tmp_path / "s.db", workers=1, port=0, grpc_port=0
    )
    exporter = InMemorySpanExporter()
    app = build_app(settings)
    app.tracing = tracing.from_environment(exporter)

    async def scenario() -> list[int]:
        server = HttpServer(app, port=0)
        await server.start()
        statuses = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            await ready(client)
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


def test_grpc_inferences_and_flow_queries_are_traced(tmp_path: Path) -> None:
    import grpc
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    models.python_model(tmp_path / "repo", "doubler", "Doubler")
    flow = models.scaled_flow(tmp_path / "repo" / "flows")  # a flow file of the repository
    settings = ServeSettings(
        repository=tmp_path / "repo", state=tmp_path / "s.db", workers=1, port=0,
        grpc_port=free_port(),
    )  # fmt: skip
    exporter = InMemorySpanExporter()
    app = build_app(settings)
    app.tracing = tracing.from_environment(exporter)
    infer = messages.ModelInferRequest(model_name="doubler")
    infer.inputs.add(name="input-0", datatype="FP32", shape=[1, 4])
    infer.raw_input_contents.append(b"\0\0\x80?" * 4)  # four 1.0
    traceparent = (("traceparent", f"00-{TRACE_ID}-{PARENT}-01"),)

    async def scenario() -> tuple[list[str], list[int], dict[str, object]]:
        server = HttpServer(app, port=0)
        await server.start()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            await ready(client)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{settings.grpc_port}") as channel:
                call = channel.unary_unary(
                    f"/{messages.SERVICE}/ModelInfer",
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=messages.ModelInferResponse.FromString,
                )
                answer = await call(infer, metadata=traceparent, timeout=30)
                codes = [answer.model_name]
                try:
                    await call(messages.ModelInferRequest(model_name="doubler"), timeout=30)
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code().name)
            put = await client.put(
                "/apps/scaled",
                json={"flow": flow, "fusion": False, "slo_ms": 30_000},
            )
            assert put.status_code == 201, put.text
            statuses = []
            for body in ({"input": [1.0, 2.0, 3.0, 4.0]}, {"input": [1.0]}):
                response = await client.post(
                    "/apps/scaled/predict",
                    json=body,
                    headers={"traceparent": f"00-{TRACE_ID}-{PARENT}-01"},
                )
                statuses.append(response.status_code)
            described = (await client.get("/apps/scaled")).json()
        await server.stop()
        return codes, statuses, described

    codes, statuses, described = asyncio.run(scenario())
    assert codes == ["doubler", "INVALID_ARGUMENT"]
    assert statuses[0] == 200 and statuses[1] >= 400
    spans = exporter.get_finished_spans()

    inferences = [s for s in spans if s.name == "infer doubler"]
    over_grpc = [s for s in inferences if s.attributes.get("rpc.system") == "grpc"]
    assert [s.attributes["rpc.grpc.status_code"] for s in over_grpc] == [0, 3]
    answered = over_grpc[0]
    assert format(answered.context.trace_id, "032x") == TRACE_ID
    assert format(answered.parent.span_id, "016x") == PARENT
    children = {s.name for s in spans if s.parent and s.parent.span_id == answered.context.span_id}
    assert children == {"decode", "queue", "worker action", "encode"}

    queries = [s for s in spans if s.name == "predict scaled"]
    assert [q.attributes["http.response.status_code"] for q in queries] == [200, statuses[1]]
    query = queries[0]
    assert format(query.context.trace_id, "032x") == TRACE_ID
    assert query.attributes["headway.app"] == "scaled"
    stages = [s for s in spans if s.parent and s.parent.span_id == query.context.span_id]
    operators = [o["operator"] for o in described["statistics"]["operators"] if o["calls"]]
    assert len(operators) == 2  # fusion off: the map and the model, each its own stage
    assert sorted(s.name for s in stages) == sorted(f"operator {o}" for o in operators)
    for stage in stages:
        assert stage.attributes["rows.in"] == 1 and stage.attributes["rows.out"] == 1
        assert query.start_time <= stage.start_time <= stage.end_time <= query.end_time


def test_tracing_is_off_without_an_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    assert tracing.from_environment() is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing.from_environment() is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
    with pytest.raises(Exception, match="knows console, otlp and none"):
        tracing.from_environment()


def test_a_selection_apps_query_has_a_span_per_model_it_called(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    for name in ("doubler", "twin"):
        models.python_model(tmp_path / "repo", name, "Doubler")
    settings = ServeSettings(
        repository=tmp_path / "repo", state=tmp_path / "s.db", workers=1, port=0, grpc_port=0
    )
    exporter = InMemorySpanExporter()
    app = build_app(settings)
    app.tracing = tracing.from_environment(exporter)

    async def scenario() -> int:
        server = HttpServer(app, port=0)
        await server.start()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
            await ready(client)
            config = {"models": ["doubler", "twin"], "policy": "exp4", "slo_ms": 30_000}
            put = await client.put("/apps/pair", json=config)
            assert put.status_code == 201, put.text
            answer = await client.post(
                "/apps/pair/predict",
                json={"input": [1.0, 2.0, 3.0, 4.0]},
                headers={"traceparent": f"00-{TRACE_ID}-{PARENT}-01"},
            )
        await server.stop()
        return answer.status_code

    assert asyncio.run(scenario()) == 200
    spans = exporter.get_finished_spans()
    (query,) = [s for s in spans if s.name == "predict pair"]
    assert format(query.context.trace_id, "032x") == TRACE_ID
    calls = {s.name: s for s in spans if s.parent and s.parent.span_id == query.context.span_id}
    assert set(calls) == {"model doubler", "model twin"}  # exp4 asks every model
    for name, span in calls.items():
        assert span.attributes["headway.model"] == name.split()[1]
        assert span.attributes["outcome"] == "answered"
        assert query.start_time <= span.start_time <= span.end_time <= query.end_time
