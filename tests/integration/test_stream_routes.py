"""Every streaming route against a live server and a generative text model, with the real
clients: the `openai` package (completions and chat, streamed and whole, its errors),
Triton's generate extension and server-sent events over httpx, and `tritonclient.grpc`'s
decoupled stream. A malformed request is a 4xx in its API's shape before any stream begins;
an error inside a stream ends it with an error event naming the cause."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import orjson
import pytest
import tritonclient.grpc as triton_grpc

import headway
from headway.errors import HeadwayError, ModelError, ModelNotFound
from headway.launcher import ServerProcess
from tests.integration.text_models import spell

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = spell(tmp_path_factory.mktemp("repository"))
    tmp = tmp_path_factory.mktemp("state")
    extra = ["--max-prompt-kb", "64", "--stream-buffer-mb", "0.05"]
    with ServerProcess(root, state=tmp / "state.db", workers=1, extra=extra,
                       log=tmp / "server.log") as srv:  # fmt: skip
        yield srv


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


def events(response: httpx.Response) -> list[dict[str, object]]:
    """The JSON of each `data:` event of a server-sent event stream."""
    out = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(orjson.loads(line[6:]))
    return out


# -- OpenAI ------------------------------------------------------------------------------------
def test_the_openai_client_lists_the_text_generators(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == ["spell"]


def test_a_completion_whole_and_streamed(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="spell", prompt="one two three four")
    assert whole.choices[0].text == "one two three four "
    assert whole.choices[0].finish_reason == "stop" and whole.usage.completion_tokens == 4
    capped = client.completions.create(model="spell", prompt="one two three four", max_tokens=2)
    assert capped.choices[0].text == "one two " and capped.choices[0].finish_reason == "length"
    chunks = list(client.completions.create(model="spell", prompt="a b c", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == "a b c "
    assert [c.choices[0].finish_reason for c in chunks][-1] == "stop"


def test_a_chat_completion_whole_and_streamed(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "hi there"}]
    whole = client.chat.completions.create(model="spell", messages=messages)  # type: ignore[arg-type]
    assert whole.choices[0].message.content == "user: hi there assistant: "
    chunks = list(
        client.chat.completions.create(
            model="spell", messages=messages, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "user: hi there assistant: "
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_malformed_completions_are_openai_errors_before_any_stream(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="nope", prompt="x", stream=True)
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as many:
        client.completions.create(model="spell", prompt="x", n=2)
    assert many.value.param == "n" and "'n' must be 1" in many.value.message
    with pytest.raises(openai.BadRequestError) as hot:
        client.completions.create(model="spell", prompt="x", temperature=7)
    assert hot.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.completions.create(model="spell", prompt="x", extra_body={"frobnicate": 1})
    assert "frobnicate" in unknown.value.message
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="spell", messages=[])
    with pytest.raises(openai.APIStatusError) as huge:  # over --max-prompt-kb 64
        client.completions.create(model="spell", prompt="x " * 40_000, stream=True)
    assert huge.value.status_code == 413 and "--max-prompt-kb" in huge.value.message


def test_an_error_inside_a_stream_ends_it_with_an_error_chunk(client: openai.OpenAI) -> None:
    stream = client.completions.create(model="spell", prompt="fail at three", stream=True)
    texts = []
    with pytest.raises(openai.APIError) as broke:
        for chunk in stream:
            texts.append(chunk.choices[0].text)
    assert texts == ["fail ", "at "] and "the spell broke at its third word" in broke.value.message


# -- Triton's generate extension, and the infer route's events ---------------------------------
def test_generate_answers_one_object_and_generate_stream_one_event_per_part(
    server: ServerProcess,
) -> None:
    answer = httpx.post(server.url + "/v2/models/spell/generate",
                        json={"text_input": "x y z", "max_tokens": 2}).json()  # fmt: skip
    assert answer == {"model_name": "spell", "model_version": "1", "text_output": "x y "}
    with httpx.stream("POST", server.url + "/v2/models/spell/versions/1/generate_stream",
                      json={"text_input": "x y z"}) as response:  # fmt: skip
        assert response.headers["content-type"] == "text/event-stream"
        parts = events(response)
    assert [p["text_output"] for p in parts] == ["x ", "y ", "z "]


def test_generate_refuses_what_it_cannot_run_and_reports_errors_as_events(
    server: ServerProcess,
) -> None:
    url = server.url + "/v2/models/spell/generate_stream"
    wrong = httpx.post(url, json={"text": "x"})
    assert wrong.status_code == 400 and "has no input 'text'" in wrong.json()["error"]
    assert httpx.post(url, content=b"{").status_code == 400
    assert httpx.post(server.url + "/v2/models/nope/generate", json={}).status_code == 404
    huge = httpx.post(url, json={"text_input": "x" * 70_000})  # over --max-prompt-kb 64
    assert huge.status_code == 413 and "--max-prompt-kb" in huge.json()["error"]
    with httpx.stream("POST", url, json={"text_input": "fail at three"}) as response:
        parts = events(response)
    assert [p.get("text_output") for p in parts[:-1]] == ["fail ", "at "]
    assert "the spell broke at its third word" in str(parts[-1]["error"])


def test_the_infer_route_streams_its_parts_as_events(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1, 1],
                        "data": ["to be"]}]}  # fmt: skip
    with httpx.stream("POST", server.url + "/v2/models/spell/infer", json=body,
                      headers={"accept": "text/event-stream"}) as response:  # fmt: skip
        parts = events(response)
    assert [p["outputs"][0]["data"] for p in parts] == [["to "], ["be "]]  # type: ignore[index]
    whole = httpx.post(server.url + "/v2/models/spell/infer", json=body).json()
    assert whole["outputs"][0]["shape"] == [1, 2]  # the parts gathered


# -- gRPC: Triton's decoupled stream -----------------------------------------------------------
def test_tritonclient_streams_a_generation_with_its_final_flag(server: ServerProcess) -> None:
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    prompt = triton_grpc.InferInput("text_input", [1, 1], "BYTES")
    prompt.set_data_from_numpy(np.array([[b"stream me now"]], dtype=object))
    try:
        client.async_stream_infer("spell", [prompt], request_id="7",
                                  enable_empty_final_response=True)  # fmt: skip
        got = [answers.get(timeout=10) for _ in range(4)]
    finally:
        client.stop_stream()
    assert all(error is None for _, error in got)
    responses = [result.get_response() for result, _ in got]  # type: ignore[attr-defined]
    finals = [r.parameters["triton_final_response"].bool_param for r in responses]
    assert finals == [False, False, False, True] and {r.id for r in responses} == {"7"}
    texts = [result.as_numpy("text_output") for result, _ in got[:3]]  # type: ignore[attr-defined]
    assert [t[0] for t in texts] == [b"stream ", b"me ", b"now "]


def test_a_model_error_inside_a_grpc_stream_reaches_tritonclient_after_its_parts(
    server: ServerProcess,
) -> None:
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    prompt = triton_grpc.InferInput("text_input", [1, 1], "BYTES")
    prompt.set_data_from_numpy(np.array([[b"fail at three"]], dtype=object))
    try:
        client.async_stream_infer("spell", [prompt], request_id="9")
        got = [answers.get(timeout=10) for _ in range(3)]
        client.async_stream_infer("spell", [prompt], model_version="7")  # no such version
        refused = answers.get(timeout=10)
    finally:
        client.stop_stream()
    texts = [result.as_numpy("text_output")[0] for result, _ in got[:2]]  # type: ignore[attr-defined]
    assert texts == [b"fail ", b"at "] and got[2][0] is None
    assert "the spell broke at its third word" in str(got[2][1])
    assert refused[0] is None and "has no version 7" in str(refused[1])  # the stream went on


# -- headway.Client ----------------------------------------------------------------------------
def test_the_client_streams_parts_and_text_blocking_and_async(server: ServerProcess) -> None:
    prompt = np.array([[b"to be or"]], dtype=object)
    with headway.Client(server.url) as client:
        parts = [
            answer["text_output"][0] for answer in client.stream("spell", {"text_input": prompt})
        ]
        assert parts == ["to ", "be ", "or "]
        assert list(client.generate_stream("spell", "a b c", max_tokens=2)) == ["a ", "b "]
        assert client.generate("spell", "a b c") == "a b c "
        with pytest.raises(ModelNotFound):
            list(client.generate_stream("nope", "x"))

    async def streamed() -> list[str]:
        async with headway.AsyncClient(server.url) as client:
            return [text async for text in client.generate_stream("spell", "x y", ttft=5.0)]

    assert asyncio.run(streamed()) == ["x ", "y "]


def test_a_model_that_raises_mid_stream_is_a_model_error_at_the_client(
    server: ServerProcess,
) -> None:
    """The stream's error event names its reason: both routes, both clients, raise the
    class the server raised, after the parts made before it."""
    prompt = np.array([[b"fail at three"]], dtype=object)
    with headway.Client(server.url) as client:
        texts: list[str] = []
        with pytest.raises(ModelError, match="the spell broke at its third word"):
            texts.extend(client.generate_stream("spell", "fail at three"))
        assert texts == ["fail ", "at "]
        with pytest.raises(ModelError, match="the spell broke at its third word"):
            list(client.stream("spell", {"text_input": prompt}))

    async def streamed() -> tuple[list[str], HeadwayError, HeadwayError]:
        async with headway.AsyncClient(server.url) as client:
            got: list[str] = []
            try:
                async for text in client.generate_stream("spell", "fail at three"):
                    got.append(text)
            except HeadwayError as exc:
                generated = exc
            try:
                async for _answer in client.stream("spell", {"text_input": prompt}):
                    pass
            except HeadwayError as exc:
                inferred = exc
            return got, generated, inferred

    got, generated, inferred = asyncio.run(streamed())
    assert got == ["fail ", "at "]
    assert isinstance(generated, ModelError) and isinstance(inferred, ModelError)
