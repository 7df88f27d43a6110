"""The gRPC server's own HTTP/2 path against real clients: tensors larger than every window
and frame (flow control both ways), the message limit, many calls on one channel answered
each with its own result, and bytes that are not HTTP/2 refused without harm."""

from __future__ import annotations

import asyncio
import queue
import socket

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_aio
from tritonclient.utils import InferenceServerException

from headway.api.grpc import frames
from headway.launcher import ServerProcess

pytestmark = pytest.mark.integration


def _tensor(rows: np.ndarray, module: object = triton_grpc) -> triton_grpc.InferInput:
    tensor = module.InferInput("input-0", list(rows.shape), "FP32")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(rows)
    return tensor


def test_a_tensor_larger_than_every_window_travels_both_ways(server: ServerProcess) -> None:
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    rows = np.random.default_rng(0).random((60_000, 4), dtype=np.float32)  # 960,000 bytes
    answer = client.infer("doubler", [_tensor(rows)])
    np.testing.assert_array_equal(answer.as_numpy("output-0"), rows * 2)


def test_a_message_over_the_limit_is_resource_exhausted_and_the_channel_lives(
    server: ServerProcess,
) -> None:
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    rows = np.ones((70_000, 4), np.float32)  # 1,120,000 bytes, over --max-body-mb 1
    with pytest.raises(InferenceServerException) as caught:
        client.infer("doubler", [_tensor(rows)])
    assert caught.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert "exceeds the limit of 1048576 bytes" in str(caught.value.message())
    answer = client.infer("doubler", [_tensor(np.ones((1, 4), np.float32))])
    np.testing.assert_array_equal(answer.as_numpy("output-0"), np.full((1, 4), 2.0))


def test_calls_in_flight_together_on_one_channel_each_get_their_own_answer(
    server: ServerProcess,
) -> None:
    async def calls() -> None:
        async with triton_aio.InferenceServerClient(server.grpc_address) as client:
            sent = [np.full((1, 4), i, np.float32) for i in range(64)]
            answers = await asyncio.gather(
                *(client.infer("doubler", [_tensor(rows, triton_aio)]) for rows in sent)
            )
            for rows, answer in zip(sent, answers, strict=True):
                np.testing.assert_array_equal(answer.as_numpy("output-0"), rows * 2)

    asyncio.run(calls())


def test_a_stream_answers_each_request_with_a_final_response(server: ServerProcess) -> None:
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(5):
            rows = np.full((2, 4), i, np.float32)
            client.async_stream_infer("doubler", [_tensor(rows)], request_id=str(i))
        got = [answers.get(timeout=10) for _ in range(5)]
    finally:
        client.stop_stream()
    by_id = {}
    for result, error in got:
        assert error is None, error
        response = result.get_response()  # type: ignore[attr-defined]
        assert response.parameters["triton_final_response"].bool_param
        by_id[response.id] = result.as_numpy("output-0")  # type: ignore[attr-defined]
    for i in range(5):
        np.testing.assert_array_equal(by_id[str(i)], np.full((2, 4), 2.0 * i))


def test_a_bad_request_on_a_stream_is_an_error_response_and_the_stream_goes_on(
    server: ServerProcess,
) -> None:
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("no-such-model", [_tensor(np.ones((1, 4), np.float32))])
        _, error = answers.get(timeout=10)
        assert "no-such-model" in str(error)
        client.async_stream_infer("doubler", [_tensor(np.ones((1, 4), np.float32))])
        result, error = answers.get(timeout=10)
        assert error is None
        np.testing.assert_array_equal(result.as_numpy("output-0"), np.full((1, 4), 2.0))  # type: ignore[attr-defined]
    finally:
        client.stop_stream(cancel_requests=True)
    assert client.is_server_live()


def test_bytes_that_are_not_http2_get_goaway_and_the_server_serves_on(
    server: ServerProcess,
) -> None:
    host, port = server.grpc_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"POST /v2/models/doubler/infer HTTP/1.1\r\nhost: x\r\n\r\n")
        received = b""
        while chunk := raw.recv(65536):
            received += chunk
    at, kinds = 0, []
    while len(received) - at >= 9:
        length, kind, _, _ = frames.frame_head(received, at)
        kinds.append(kind)
        at += 9 + length
    assert kinds[-1] == frames.GOAWAY and b"not an HTTP/2 preface" in received
    assert triton_grpc.InferenceServerClient(server.grpc_address).is_server_live()


def test_compressed_requests_answer_as_uncompressed_ones(server: ServerProcess) -> None:
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    rows = np.arange(4000, dtype=np.float32).reshape(1000, 4)
    for algorithm in ("gzip", "deflate"):
        answer = client.infer("doubler", [_tensor(rows)], compression_algorithm=algorithm)
        np.testing.assert_array_equal(answer.as_numpy("output-0"), rows * 2)
