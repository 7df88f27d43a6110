"""Stopping a real server (a worker process, a slow model) while an inference is in flight."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import orjson
import pytest

from headway.api.http import HttpServer
from headway.cli.serve import ServeSettings, build_app
from tests.api.echo_server import response
from tests.integration import models
from tests.integration.oip_client import BODY

pytestmark = pytest.mark.integration


def test_an_inference_that_outlives_the_grace_is_answered_503_and_the_stop_completes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "repo"
    models.sleeper(root, "slow", 0.6, extra="slo_ms: 10000\n")
    settings = ServeSettings(
        repository=root, state=tmp_path / "s.db", workers=1, port=0, grpc_port=0
    )

    async def scenario() -> None:
        server = HttpServer(build_app(settings), port=0, grace=0.2)
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        request = b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
        writer.write(request % len(BODY) + BODY)
        for _ in range(200):  # until the frontend has it (and its worker runs it)
            if server.unanswered:
                break
            await asyncio.sleep(0.005)
        assert server.unanswered == 1
        began = time.monotonic()
        await server.stop()
        status, headers, body = await response(reader)
        assert status == 503 and headers["connection"] == "close"
        assert orjson.loads(body) == {"error": "the server is stopping"}
        assert time.monotonic() - began < 5.0
        assert server.unanswered == 0
        writer.close()

    with caplog.at_level(logging.ERROR):
        asyncio.run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_grpc_call_in_flight_is_answered_before_the_grpc_server_stops(tmp_path: Path) -> None:
    """GOAWAY to the client, its call in flight finishes within the grace, then the port
    closes."""
    import grpc
    import numpy as np

    from headway.api.grpc import messages
    from headway.api.grpc.server import GrpcServer

    root = tmp_path / "repo"
    models.sleeper(root, "slow", 0.6, extra="slo_ms: 10000\n")
    settings = ServeSettings(
        repository=root, state=tmp_path / "s.db", workers=1, port=0, grpc_port=0
    )
    request = messages.ModelInferRequest(model_name="slow")
    request.inputs.add(name="input-0", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.ones((1, 4), np.float32).tobytes())

    async def scenario() -> None:
        app = build_app(settings)
        companion = GrpcServer(app, port=0, grace=5.0)
        app.companions.append(companion)
        server = HttpServer(app, port=0)
        await server.start()
        async with grpc.aio.insecure_channel(companion.address) as channel:
            infer = channel.unary_unary(
                f"/{messages.SERVICE}/ModelInfer",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=messages.ModelInferResponse.FromString,
            )
            call = infer(request)
            for _ in range(400):  # until the gRPC server has it
                if companion.unanswered:
                    break
                await asyncio.sleep(0.005)
            assert companion.unanswered == 1
            await server.stop()
            answer = await call
            assert answer.model_name == "slow" and len(answer.raw_output_contents) == 1
            assert companion.unanswered == 0 and not companion.connections

    asyncio.run(scenario())
