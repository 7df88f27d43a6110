"""The gRPC server's dispatch of ModelInfer over a real controller (simulated workers, an
injected clock): admitted in the read that completed it, answered from its prediction, and
under overload refused before its tensors are decoded, as REST's requests are."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import hpack
import numpy as np
from tests.api.http2_wire import HEADERS, Server, Wire, statuses, trailers

from headway.api.app import HeadwayApp
from headway.api.grpc import frames as f
from headway.api.grpc import messages
from headway.api.grpc.calls import Limits
from headway.api.grpc.http2 import Http2Connection
from headway.api.grpc.server import CallRouter
from headway.clock import ManualClock
from headway.control.controller import Controller
from headway.repository import Repository
from headway.testing import FakeEngine

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
    "inputs: [{name: x, datatype: FP32, shape: [-1, 2]}]\n"
)


def infer(stream: int, encoder: hpack.Encoder, timeout_us: int) -> bytes:
    request = messages.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    request.raw_input_contents.append(np.ones((1, 2), np.float32).tobytes())
    request.parameters["timeout"].int64_param = timeout_us
    message = request.SerializeToString()
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    return f.frame(f.HEADERS, f.END_HEADERS, stream, encoder.encode(HEADERS)) + f.frame(
        f.DATA, f.END_STREAM, stream, body
    )


def test_inferences_read_together_batch_and_a_late_one_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)

    async def scenario() -> None:
        clock = ManualClock(start=100.0)
        engine = FakeEngine(compute=lambda a, t: {"y": t["x"]}, duration=0.002)
        controller = Controller(Repository.scan(tmp_path), engine, clock=clock)
        app = HeadwayApp(controller)
        await app.start()
        for _ in range(200):  # the warm-up runs answer on their own
            await asyncio.sleep(0)
        server, wire, encoder = Server(), Wire(), hpack.Encoder()
        connection = Http2Connection(CallRouter(app), Limits(), server)
        connection.connection_made(wire)  # type: ignore[arg-type]
        connection.data_received(f.PREFACE + f.settings({}))
        before = controller.model_statistics("m").counts.batch_size.count
        connection.data_received(b"".join(infer(s, encoder, 50_000) for s in (1, 3, 5, 7)))
        assert server.unanswered == 4
        for _ in range(200):
            if not server.unanswered:
                break
            clock.advance(0.001)
            await asyncio.sleep(0)
        answered = statuses(wire)
        assert [answered[s][0] for s in (1, 3, 5, 7)] == [b"0"] * 4
        assert all(b"headway-reason" not in trailers(wire)[s] for s in (1, 3, 5, 7))
        after = controller.model_statistics("m").counts.batch_size.count
        assert after - before == 1  # one worker action
        # read 60 ms after its bytes may have arrived, with 50 ms to live: refused unread
        server.floor = time.monotonic() - 0.060
        connection.data_received(infer(9, encoder, 50_000))
        status, message = statuses(wire)[9]
        assert status == b"4" and b"waited too long to be read" in message
        assert trailers(wire)[9][b"headway-reason"] == b"late"  # as REST's body names it
        # counted in bulk, at the turn's end or when the statistics are read
        assert controller.model_statistics("m").counts.errors["deadline"] == 1
        assert server.unanswered == 0
        await app.stop()

    asyncio.run(scenario())
