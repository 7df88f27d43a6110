"""The frontend <-> worker stream transport: framing over any chunking, real workers over
Unix and TCP sockets, and messages larger than a socket buffer (partial writes)."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

from headway.runtime import handshake
from headway.runtime.engines.local import LocalEngine
from headway.runtime.wire import FrameReader, framed, listen, pack, send_all, unpack
from headway.runtime.worker import _poll


def stream(frames: list[Any]) -> bytes:
    buffers, total = framed(frames)
    data = b"".join(bytes(memoryview(b).cast("B")) for b in buffers if memoryview(b).nbytes)
    assert len(data) == total
    return data


def test_reader_splits_messages_however_the_stream_is_chunked() -> None:
    messages = [
        pack({"op": "infer", "id": i}, {"x": np.arange(i * 7, dtype=np.float64)}) for i in range(20)
    ]
    data = b"".join(stream(m) for m in messages)
    rng = random.Random(0)
    for _ in range(20):
        reader, got, position = FrameReader(), [], 0
        while position < len(data):
            step = rng.choice([1, 3, 17, 100, 4096])
            got += reader.feed(data[position : position + step])
            position += step
        assert len(got) == len(messages)
        for i, frames in enumerate(got):
            header, tensors = unpack(frames)
            assert header["id"] == i
            np.testing.assert_array_equal(tensors["x"], np.arange(i * 7, dtype=np.float64))


def test_reader_keeps_empty_frames_and_zero_d_arrays() -> None:
    frames = pack({"op": "x"}, {"s": np.array(2.5), "e": np.zeros((0, 3))})
    [got] = FrameReader().feed(stream(frames))
    _, tensors = unpack(got)
    assert tensors["s"].shape == () and tensors["s"] == 2.5
    assert tensors["e"].shape == (0, 3)


@pytest.mark.integration
@pytest.mark.parametrize("endpoint", [None, "tcp://127.0.0.1:0"])
def test_engine_round_trips_large_messages_to_a_real_worker(endpoint: str | None) -> None:
    async def scenario() -> None:
        engine = LocalEngine(1, endpoint=endpoint)
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        replies: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        engine.on_ready = lambda worker, pid: ready.done() or ready.set_result(pid)
        engine.on_message = lambda worker, header, tensors: replies.put_nowait(header)
        await engine.start()
        try:
            await asyncio.wait_for(ready, 30)
            big = np.random.default_rng(0).random((2048, 1024))  # 16 MiB: many partial writes
            for i in range(3):
                tensors = {"x": big, "empty": np.zeros((0, 3)), "s": np.array(1.0)}
                assert engine.send(0, {"op": "ping", "id": i}, tensors)
            for i in range(3):
                header = await asyncio.wait_for(replies.get(), 30)
                assert header["id"] == i and header["ok"]
        finally:
            await engine.stop()

    asyncio.run(scenario())


@pytest.mark.integration
def test_catch_up_hears_a_waiting_reply_without_a_turn_of_the_loop() -> None:
    async def scenario() -> None:
        engine = LocalEngine(1)
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        heard: list[int] = []
        engine.on_ready = lambda worker, pid: ready.done() or ready.set_result(pid)
        engine.on_message = lambda worker, header, tensors: heard.append(header["id"])
        await engine.start()
        try:
            await asyncio.wait_for(ready, 30)
            assert engine.send(0, {"op": "ping", "id": 7}, {})
            time.sleep(0.5)  # the loop is held (a long turn): the reply waits on the socket
            assert heard == []
            engine.catch_up()
            assert heard == [7]
            engine.catch_up()  # nothing more waiting: nothing happens
            assert heard == [7]
        finally:
            await engine.stop()

    asyncio.run(scenario())


def test_poll_returns_what_arrives_within_the_window_and_none_after() -> None:

    a, b = socket.socketpair()
    with a, b:
        started = time.perf_counter()
        assert _poll(b, 0.01) is None
        assert time.perf_counter() - started >= 0.01
        a.send(b"x")
        assert _poll(b, 0.01) == b"x"


@pytest.mark.integration
def test_a_worker_exits_when_the_frontend_goes_away(tmp_path: Any) -> None:

    endpoint = f"ipc://{tmp_path}/w.sock"
    listener = listen(endpoint)
    listener.setblocking(True)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "headway.runtime.worker",
            "--endpoint",
            endpoint,
            "--identity",
            "0.1",
        ],
        env={**os.environ, handshake.SECRET_ENV: "the-secret"},
    )
    try:
        listener.settimeout(30)
        conn, _ = listener.accept()
        conn.settimeout(30)
        challenge = handshake.challenge()
        send_all(conn, pack(dict(challenge)))
        [hello] = FrameReader().feed(conn.recv(65536))
        assert handshake.refusal("the-secret", challenge, unpack(hello)[0]) is None
        assert unpack(hello)[0]["identity"] == "0.1"
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()
        assert worker.wait(timeout=10) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
        listener.close()
