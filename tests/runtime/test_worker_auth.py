"""Only the workers a server started may be its workers; a lost worker is started again.

The handshake's rules on their own, then a real engine with a real worker process on a TCP
endpoint, and impostors that connect to it as any process on the network could: one that
speaks the protocol but does not hold the secret (claiming the live worker's identity), one
that replays a proof overheard on another connection, and one that sends garbage. Each is
refused, and the real worker keeps its slot and answers. Finally the real worker's connection
is cut: the engine restarts it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.repository import read_model
from headway.runtime import handshake
from headway.runtime.engines.local import LocalEngine
from headway.runtime.wire import FrameReader, connect, pack, send_all, unpack


def test_a_hello_must_prove_the_secret_for_this_challenge_and_identity() -> None:
    secret, challenge = handshake.new_secret(), handshake.challenge()
    good = handshake.hello(secret, challenge, "0.1", os.getpid())
    assert handshake.refusal(secret, challenge, good) is None
    assert "does not match" in str(
        handshake.refusal(secret, challenge, {**good, "identity": "1.1"})
    )
    other = handshake.hello(handshake.new_secret(), challenge, "0.1", os.getpid())
    assert "does not match" in str(handshake.refusal(secret, challenge, other))
    replayed = handshake.refusal(secret, handshake.challenge(), good)  # another connection's
    assert "does not match" in str(replayed)
    assert "no proof" in str(handshake.refusal(secret, challenge, {"op": "hello"}))
    assert "not a hello" in str(handshake.refusal(secret, challenge, {"op": "infer"}))


@dataclass
class Events:
    ready: asyncio.Queue[tuple[int, int]] = field(default_factory=asyncio.Queue)
    replies: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    outputs: asyncio.Queue[dict[str, np.ndarray]] = field(default_factory=asyncio.Queue)
    exits: list[int] = field(default_factory=list)


@asynccontextmanager
async def engine_on_tcp(hello_timeout: float = 10.0) -> AsyncIterator[tuple[LocalEngine, Events]]:
    engine = LocalEngine(
        1, endpoint="tcp://127.0.0.1:0", watch_interval=0.05, hello_timeout=hello_timeout
    )
    events = Events()
    engine.on_ready = lambda worker, pid: events.ready.put_nowait((worker, pid))

    def heard(worker: int, header: Any, tensors: dict[str, np.ndarray]) -> None:
        events.replies.put_nowait(header)
        events.outputs.put_nowait(tensors)

    engine.on_message = heard
    engine.on_exit = lambda worker, code: events.exits.append(worker)
    await engine.start()
    try:
        yield engine, events
    finally:
        await engine.stop()


async def ping(engine: LocalEngine, events: Events, tag: int) -> int:
    """The pid of the process that answers worker 0's ping."""
    assert engine.send(0, {"op": "ping", "id": tag}, {})
    reply = await asyncio.wait_for(events.replies.get(), 30)
    assert reply["id"] == tag and reply["ok"]
    return int(reply["pid"])


def impostor(endpoint: str, hello: Any) -> tuple[dict[str, Any], bool]:
    """Connect as a worker would, read the challenge, send `hello` (a header, a function of the
    challenge, or raw bytes); (the challenge, whether the server then closed the connection)."""
    sock = connect(endpoint)
    sock.settimeout(20)
    try:
        [first] = FrameReader().feed(sock.recv(65536))
        challenge = unpack(first)[0]
        if isinstance(hello, bytes):
            sock.sendall(hello)
        else:
            send_all(sock, pack(hello(challenge) if callable(hello) else hello))
        try:
            closed = sock.recv(65536) == b""
        except (TimeoutError, ConnectionResetError):
            closed = isinstance(hello, bytes)  # a reset is a close too
        return challenge, closed
    finally:
        sock.close()


@pytest.mark.integration
def test_impostors_are_refused_and_the_real_worker_keeps_serving() -> None:
    async def scenario() -> None:
        async with engine_on_tcp() as (engine, events):
            _, pid = await asyncio.wait_for(events.ready.get(), 30)
            assert await ping(engine, events, 1) == pid
            loop = asyncio.get_running_loop()
            overheard = handshake.hello("not-the-secret", {"nonce": "00"}, "0.1", 1)
            attempts = [
                {"op": "hello", "pid": 4242, "identity": "0.1"},  # main's hello: no proof
                lambda c: handshake.hello("a-guess", c, "0.1", 4242),
                overheard,
                b"\xff" * 4 + b"garbage" * 5000,
            ]
            for attempt in attempts:
                _, closed = await loop.run_in_executor(None, impostor, engine.endpoint, attempt)
                assert closed
                # The real worker still holds its slot and answers; nothing was restarted.
                assert await ping(engine, events, 2) == pid
            assert events.exits == [] and events.ready.empty()
            assert engine.pids() == {0: pid}

    asyncio.run(scenario())


@pytest.mark.integration
def test_a_connection_that_never_says_hello_is_closed() -> None:
    async def scenario() -> None:
        async with engine_on_tcp(hello_timeout=0.5) as (engine, events):
            _, pid = await asyncio.wait_for(events.ready.get(), 30)
            loop = asyncio.get_running_loop()

            def silent() -> bytes:
                sock = connect(engine.endpoint)
                sock.settimeout(20)
                with sock:
                    sock.recv(65536)  # the challenge
                    return sock.recv(65536)  # then nothing: the server closes

            assert await loop.run_in_executor(None, silent) == b""
            assert await ping(engine, events, 4) == pid and events.exits == []

    asyncio.run(scenario())


@pytest.mark.integration
def test_a_worker_whose_connection_is_lost_is_started_again() -> None:
    async def scenario() -> None:
        async with engine_on_tcp() as (engine, events):
            _, pid = await asyncio.wait_for(events.ready.get(), 30)
            connection = engine._procs[0].connection
            assert connection is not None
            connection.sock.shutdown(socket.SHUT_RDWR)  # the network drops it
            _, again = await asyncio.wait_for(events.ready.get(), 60)
            assert again != pid and events.exits == [0]
            assert await ping(engine, events, 3) == again

    asyncio.run(scenario())


SNOOP_PY = """
import os
import numpy as np

class Snoop:
    inputs = [{"name": "input-0", "datatype": "FP32", "shape": [-1, 1]}]

    def predict(self, batch):
        return np.full(batch.shape, float(os.environ.get("HEADWAY_WORKER_SECRET") is not None))
"""


@pytest.mark.integration
def test_the_secret_is_neither_on_the_command_line_nor_left_for_models(tmp_path: Path) -> None:
    folder = tmp_path / "snoop"
    (folder / "1").mkdir(parents=True)
    (folder / "snoop.py").write_text(SNOOP_PY)
    (folder / "model.yaml").write_text("framework: python\nentrypoint: snoop.py:Snoop\n")
    config = read_model(folder).to_wire()

    async def scenario() -> None:
        async with engine_on_tcp() as (engine, events):
            _, pid = await asyncio.wait_for(events.ready.get(), 30)
            secret = engine.env[handshake.SECRET_ENV]
            assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
            assert engine.send(0, {"op": "load", "id": 1, "model": "snoop@1", "config": config}, {})
            loaded = await asyncio.wait_for(events.replies.get(), 30)
            assert loaded["ok"], loaded
            events.outputs.get_nowait()  # the load's (none)
            batch = {"input-0": np.zeros((1, 1), np.float32)}
            assert engine.send(0, {"op": "infer", "id": 2, "model": "snoop@1", "rows": 1}, batch)
            answer = await asyncio.wait_for(events.outputs.get(), 30)
            assert answer["output-0"].tolist() == [[0.0]], "a model saw the worker's secret"

    asyncio.run(scenario())
