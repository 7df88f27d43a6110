"""What the text routes take and refuse, before anything runs (`api.completions.parse`,
`api.generate.parse`): every malformed request names its argument, in the API's own terms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from headway.api import completions, generate
from headway.api.completions import OpenAIError
from headway.errors import InvalidInput, PayloadTooLarge
from headway.repository import ModelConfig, TensorSpec


def body(**fields: object) -> bytes:
    return orjson.dumps({"model": "m", **fields})


def test_a_completion_takes_openai_arguments_and_passes_options_to_the_model() -> None:
    request = completions.parse(
        body(prompt="hi", max_tokens=5, temperature=0.5, seed=3, stop="\n", stream=True,
             ttft_ms=200, tpot_ms=50, priority=1),
        chat=False,
    )  # fmt: skip
    assert request.prompt == b"hi" and request.stream and request.max_tokens == 5
    assert request.parameters == {"max_tokens": 5, "temperature": 0.5, "seed": 3, "stop": ["\n"]}
    assert (request.ttft, request.tpot, request.priority) == (0.2, 0.05, 1)
    assert completions.parse(body(prompt=["one"]), chat=False).max_tokens == 16  # the default


def test_a_completion_passes_its_parameters_object_to_the_model_under_the_named_ones() -> None:
    request = completions.parse(
        body(prompt="hi", max_tokens=4, parameters={"ignore_end": True, "max_tokens": 99}),
        chat=False,
    )
    assert request.parameters == {"ignore_end": True, "max_tokens": 4}


def test_a_chat_becomes_one_prompt_a_line_per_message() -> None:
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]}]  # fmt: skip
    request = completions.parse(body(messages=messages, max_completion_tokens=3), chat=True)
    assert request.prompt == b"system: be brief\nuser: hi\nassistant:"
    assert request.max_tokens == 3


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"prompt": "x", "n": 2}, "n"),
        ({"prompt": "x", "temperature": 3}, "temperature"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "max_tokens": True}, "max_tokens"),
        ({"prompt": "x", "stop": ["a"] * 5}, "stop"),
        ({"prompt": "x", "logprobs": 2}, "logprobs"),
        ({"prompt": "x", "echo": True}, "echo"),
        ({"prompt": "x", "stream": "yes"}, "stream"),
        ({"prompt": "x", "bogus": 1}, "bogus"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({}, "prompt"),
        ({"prompt": "x", "ttft_ms": -1}, "ttft_ms"),
        ({"prompt": "x", "parameters": [1]}, "parameters"),
    ],
)
def test_a_malformed_completion_names_its_argument(fields: dict[str, object], param: str) -> None:
    with pytest.raises(OpenAIError) as caught:
        completions.parse(body(**fields), chat=False)
    assert caught.value.param == param


@pytest.mark.parametrize(
    "messages",
    [
        [],
        "hi",
        [{"role": "robot", "content": "x"}],
        [{"role": "user", "content": [{"type": "image_url"}]}],
    ],
)
def test_a_malformed_chat_is_refused(messages: object) -> None:
    with pytest.raises(OpenAIError):
        completions.parse(body(messages=messages), chat=True)


def test_no_model_not_json_and_a_prompt_over_the_limit_are_refused() -> None:
    with pytest.raises(OpenAIError, match="'model' is required"):
        completions.parse(orjson.dumps({"prompt": "x"}), chat=False)
    with pytest.raises(OpenAIError, match="not valid JSON"):
        completions.parse(b"{", chat=False)
    with pytest.raises(PayloadTooLarge, match="--max-prompt-kb"):
        completions.parse(body(prompt="x" * 101), chat=False, max_prompt=100)


MODEL = ModelConfig(
    name="gen", version=1, framework="python", path=Path("."),
    inputs=(TensorSpec("text_input", "BYTES", (-1, 1)), TensorSpec("k", "INT32", (-1,))),
)  # fmt: skip


def test_generate_maps_keys_to_inputs_and_options_to_parameters() -> None:
    raw = orjson.dumps({"text_input": "hi", "k": 3, "max_tokens": 4,
                        "parameters": {"temperature": 0.1}})  # fmt: skip
    inputs, parameters = generate.parse(raw, MODEL)
    assert inputs["text_input"].shape == (1, 1) and inputs["text_input"][0, 0] == b"hi"
    assert inputs["k"].dtype == np.int32 and inputs["k"].shape == (1,)
    assert parameters == {"temperature": 0.1, "max_tokens": 4}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"text_input": "hi", "k": 1, "colour": 1}, "has no input 'colour'"),
        ({"text_input": "hi"}, "needs inputs ['k']"),
        ({"text_input": 5, "k": 1}, "is BYTES"),
        ({"text_input": "hi", "k": "three"}, "is INT32"),
        ({"text_input": "hi", "k": 2**31}, "is INT32"),  # out of its range, found by fuzzing
        ({"text_input": "hi", "k": 1, "parameters": []}, "'parameters' must be an object"),
        ([1], "a JSON object"),
    ],
)
def test_a_malformed_generate_request_names_what_is_wrong(raw: object, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        generate.parse(orjson.dumps(raw), MODEL)
    assert message in caught.value.message
