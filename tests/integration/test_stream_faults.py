"""Faults under live streams, at the transports: a worker killed while streams run ends each
of them with an error naming the cause (a final SSE error event, a tritonclient stream error,
headway.Client's WorkerFailed), within seconds, never a hang; the model then serves new
streams on the replacement worker."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import orjson
import pytest
import tritonclient.grpc as triton_grpc

import headway
from headway.errors import HeadwayError, WorkerFailed
from headway.launcher import ServerProcess
from tests.integration.text_models import spell
from tests.processes import children

pytestmark = pytest.mark.integration
#: Seconds within which a stream must end once its worker is gone (generous: a busy machine).
END_S = 15.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    root = spell(tmp_path / "repository")
    with ServerProcess(root, state=tmp_path / "state.db", workers=1,
                       log=tmp_path / "server.log") as srv:  # fmt: skip
        yield srv


def sse_stream(server: ServerProcess, started: threading.Event) -> list[dict[str, object]]:
    """A slow OpenAI stream read to its end: its events (the last may be an error)."""
    body = {"model": "spell", "prompt": "slow 1000", "max_tokens": 1000, "stream": True}
    got: list[dict[str, object]] = []
    with httpx.stream("POST", server.url + "/v1/completions", json=body,
                      timeout=END_S * 2) as response:  # fmt: skip
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                got.append(orjson.loads(line[6:]))
                started.set()
    return got


def client_stream(server: ServerProcess, started: threading.Event) -> HeadwayError:
    """A slow generation through `headway.Client`: the error that ends it."""
    with headway.Client(server.url, timeout=END_S * 2) as client:
        try:
            for _text in client.generate_stream("spell", "slow 1000"):
                started.set()
        except HeadwayError as exc:
            return exc
    raise AssertionError("the stream ended without an error")


def async_client_stream(server: ServerProcess, started: threading.Event) -> HeadwayError:
    """A slow inference in parts (the infer route's events) through `headway.AsyncClient`:
    the error that ends it."""
    prompt = np.array([[b"slow 1000"]], dtype=object)

    async def stream() -> HeadwayError:
        async with headway.AsyncClient(server.url, timeout=END_S * 2) as client:
            try:
                async for _answer in client.stream("spell", {"text_input": prompt}):
                    started.set()
            except HeadwayError as exc:
                return exc
        raise AssertionError("the stream ended without an error")

    return asyncio.run(stream())


def test_a_worker_killed_mid_stream_ends_its_streams_with_the_cause_and_serves_on(
    server: ServerProcess,
) -> None:
    assert server.process is not None
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    grpc_client = triton_grpc.InferenceServerClient(server.grpc_address)
    grpc_client.start_stream(callback=lambda result, error: answers.put((result, error)))
    prompt = triton_grpc.InferInput("text_input", [1, 1], "BYTES")
    prompt.set_data_from_numpy(np.array([[b"slow 1000"]], dtype=object))
    started = [threading.Event() for _ in range(3)]
    with ThreadPoolExecutor(3) as pool:
        try:
            sse = pool.submit(sse_stream, server, started[0])
            blocking = pool.submit(client_stream, server, started[1])
            awaited = pool.submit(async_client_stream, server, started[2])
            grpc_client.async_stream_infer("spell", [prompt], request_id="1")
            _, first_error = answers.get(timeout=END_S)
            assert first_error is None  # every stream is running
            assert all(event.wait(END_S) for event in started)
            (worker,) = children(server.process.pid)
            os.kill(worker, signal.SIGKILL)
            killed = time.monotonic()
            events = sse.result(timeout=END_S)
            raised = [blocking.result(timeout=END_S), awaited.result(timeout=END_S)]
            error = None
            while error is None:  # the parts already on their way, then the error
                _, error = answers.get(timeout=END_S)
            assert time.monotonic() - killed < END_S
        finally:
            grpc_client.stop_stream()
    last = events[-1]
    assert "error" in last and "worker running the stream died" in str(last["error"])
    assert all("choices" in event for event in events[:-1])
    assert "worker running the stream died" in str(error)
    # headway.Client, blocking and async, raises the class the server names: WorkerFailed
    assert all(isinstance(exc, WorkerFailed) for exc in raised), raised
    assert all("worker running the stream died" in exc.message for exc in raised)
    with openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=END_S * 2,
                       max_retries=0) as client:  # fmt: skip
        deadline = time.monotonic() + END_S * 2  # the replacement worker loads the model
        while True:
            try:
                chunks = client.completions.create(model="spell", prompt="a b c", stream=True)
                assert "".join(chunk.choices[0].text for chunk in chunks) == "a b c "
                break
            except openai.APIStatusError as refused:  # 503 while no worker holds it
                assert refused.status_code == 503 and time.monotonic() < deadline
                time.sleep(0.2)


def test_streams_the_real_clients_cancel_free_their_sequences(server: ServerProcess) -> None:
    """tritonclient's stop_stream(cancel_requests=True) and a headway.Client loop left early
    each withdraw their requests: the model's 16 sequences are free for 16 new streams."""
    grpc_client = triton_grpc.InferenceServerClient(server.grpc_address)
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    grpc_client.start_stream(callback=lambda result, error: answers.put((result, error)))
    prompt = triton_grpc.InferInput("text_input", [1, 1], "BYTES")
    prompt.set_data_from_numpy(np.array([[b"slow 1000"]], dtype=object))
    for number in range(12):
        grpc_client.async_stream_infer("spell", [prompt], request_id=str(number))
    running: set[str] = set()
    while len(running) < 12:  # every one of them has made a part
        result, error = answers.get(timeout=END_S)
        assert error is None
        running.add(result.get_response().id)  # type: ignore[attr-defined]
    grpc_client.stop_stream(cancel_requests=True)
    with headway.Client(server.url) as client:
        for _ in range(12):
            for _text in client.generate_stream("spell", "slow 1000"):
                break  # leaves the stream after its first part
    time.sleep(0.5)  # withdrawn sequences leave at their next step
    with ThreadPoolExecutor(16) as pool, headway.Client(server.url) as client:
        texts = list(pool.map(lambda _: "".join(client.generate_stream("spell", "slow 3",
                                                                       timeout=END_S)),
                              range(16)))  # fmt: skip
    assert texts == ["x x x "] * 16
