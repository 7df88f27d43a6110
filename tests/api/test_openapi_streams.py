"""The OpenAPI document's schemas of the stream routes say what their parsers take: an
OpenAI request is valid exactly when `completions.parse` takes it, a generate request or a
request's `parameters` that the document refuses is refused (schemathesis's negative checks
over a live server, `tests/integration/test_openapi_fuzz.py`, rely on it), and each kind of
event the document lists describes the events the routes send."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft4Validator

from headway.api import completions, generate
from headway.api.completions import CompletionEvents
from headway.api.errors import error_json
from headway.api.generate import GenerateEvents
from headway.api.oip import infer_head
from headway.api.openapi import OPENAPI
from headway.api.parameters import schedule_policy
from headway.errors import InvalidInput, ModelError
from headway.repository import ModelConfig, TensorSpec


def _draft4(schema: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema draft 4 (what schemathesis does): `nullable`
    becomes `anyOf [schema, null]`, unless an `enum` without null rules null out."""
    if isinstance(schema, list):
        return [_draft4(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {key: _draft4(value) for key, value in schema.items()}
    if converted.pop("nullable", False):
        enum = converted.get("enum")
        if enum is None or None in enum:
            return {"anyOf": [converted, {"type": "null"}]}
    return converted


def validator(name: str) -> Draft4Validator:
    components = _draft4(OPENAPI["components"])
    return Draft4Validator({"$ref": f"#/components/schemas/{name}", "components": components})


# -- OpenAI: valid exactly when parsed ---------------------------------------------------------
ANY = [None, True, False, 0, 1, 2, -1, 0.5, 1.0, 3.5, "", "x", [], ["x"], {}, {"a": 1}]
MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from([*completions.ROLES, "robot", None, 1]),
        "content": st.sampled_from(
            ["hi", None, 3, [], [{"type": "text", "text": "a"}], [{"type": "text"}],
             [{"type": "image", "text": "a"}], ["a"]]
        ),
        "name": st.just("n"),
    },
)  # fmt: skip
VALID_MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(completions.ROLES)},
        optional={"content": st.sampled_from(["hi", None, [], [{"type": "text", "text": "a"}]])},
    ),
    min_size=1,
    max_size=3,
)
#: Values each argument is tried with: its edges, valid and not, and values of every type
#: (stop sequences ASCII: the document bounds characters, the parser bytes).
CANDIDATES: dict[str, st.SearchStrategy[Any]] = {
    "model": st.sampled_from(["m", "", 3, None]),
    "prompt": st.sampled_from(["p", ["p"], [], ["p", "q"], [1], None, 5, {"p": 1}]),
    "messages": st.lists(MESSAGE, max_size=3) | st.sampled_from(ANY),
    "max_tokens": st.sampled_from([1, 5, 0, -3, 2.0, True, "5", None]),
    "max_completion_tokens": st.sampled_from([1, 5, 0, 2.0, True, None]),
    "temperature": st.sampled_from([0, 2, 2.5, -0.1, 1.5, True, "1", None]),
    "top_p": st.sampled_from([0, 1, 1.1, 0.5, False, None]),
    "presence_penalty": st.sampled_from([-2, 2, -2.5, 3, None]),
    "frequency_penalty": st.sampled_from([-2, 0.3, 2.1, None]),
    "n": st.sampled_from([1, 2, 0, 1.0, True, "1", None]),
    "best_of": st.sampled_from([1, 3, 1.5, False, None]),
    "echo": st.sampled_from([False, True, 0, 0.0, 1, None, "no"]),
    "logprobs": st.sampled_from([False, True, 0, 2, None]),
    "suffix": st.sampled_from([None, "", "s", 0]),
    "top_logprobs": st.sampled_from([None, 0, 2]),
    "stream": st.sampled_from([True, False, None, 0, "true"]),
    "stream_options": st.sampled_from(
        [
            None,
            {},
            {"include_usage": True},
            {"include_usage": None},
            {"include_usage": 1},
            {"other": 1},
            [],
            True,
        ]
    ),
    "stop": st.sampled_from(
        [
            "s",
            ["a", "b"],
            [],
            ["a"] * 4,
            ["a"] * 5,
            "x" * 1024,
            "x" * 1025,
            ["x" * 1025],
            [1],
            3,
            None,
        ]
    ),
    "seed": st.sampled_from([0, -5, 7, 1.5, True, "7", None]),
    "user": st.sampled_from(["u", "", None, 3]),
    "logit_bias": st.sampled_from([None, {}, {"1": 2}, [], 0]),
    "ttft_ms": st.sampled_from([0.001, 50, 0, -1, True, "5", None]),
    "tpot_ms": st.sampled_from([10, 0, -2.5, None, False]),
    "priority": st.sampled_from([0, 1, 7, -1, 1.5, True, None]),
    "parameters": st.sampled_from([{}, {"ignore_end": True}, {"max_tokens": 3}, None, [], 1]),
    "surprise": st.sampled_from(ANY),
}


def _valid_values(schema: str, key: str) -> st.SearchStrategy[Any]:
    """`CANDIDATES[key]`, only the values the document takes for `key` in `schema`."""
    components = _draft4(OPENAPI["components"])
    check = Draft4Validator(components["schemas"][schema]["properties"][key])
    return (VALID_MESSAGES if key == "messages" else CANDIDATES[key]).filter(check.is_valid)


def requests(chat: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Requests whose arguments are all valid but (maybe) one, which may be anything: so
    each argument's edges are met where nothing else refuses the request."""
    schema = "ChatCompletionRequest" if chat else "CompletionRequest"
    keys = sorted(completions._CHAT if chat else completions._COMPLETION)
    text = "messages" if chat else "prompt"
    valid = st.fixed_dictionaries(
        {"model": st.just("m"), text: _valid_values(schema, text)},
        optional={key: _valid_values(schema, key) for key in keys if key not in ("model", text)},
    )

    def one_more(raw: dict[str, Any], key: str, value: Any, drop: bool) -> dict[str, Any]:
        raw = dict(raw)
        if drop:
            raw.pop(key, None)
        else:
            raw[key] = value
        return raw

    key = st.sampled_from([*keys, "surprise"])
    return st.builds(one_more, valid, key, key.flatmap(lambda k: CANDIDATES[k]), st.booleans())


def _parsed(raw: dict[str, Any], chat: bool) -> bool:
    try:
        completions.parse(orjson.dumps(raw), chat=chat)
    except InvalidInput:
        return False
    return True


@settings(max_examples=600, deadline=None)
@given(raw=requests(chat=False))
def test_a_completion_is_valid_exactly_when_it_is_taken(raw: dict[str, Any]) -> None:
    valid = validator("CompletionRequest").is_valid(raw)
    assert valid == _parsed(raw, chat=False), raw


@settings(max_examples=600, deadline=None)
@given(raw=requests(chat=True))
def test_a_chat_completion_is_valid_exactly_when_it_is_taken(raw: dict[str, Any]) -> None:
    valid = validator("ChatCompletionRequest").is_valid(raw)
    assert valid == _parsed(raw, chat=True), raw


@pytest.mark.parametrize(("path", "chat"), [("/v1/completions", False),
                                           ("/v1/chat/completions", True)])  # fmt: skip
def test_the_documented_examples_are_taken(path: str, chat: bool) -> None:
    media = OPENAPI["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    assert [_parsed(example["value"], chat) for example in media["examples"].values()] == [
        True,
        True,
    ]


# -- generate and parameters: what the document refuses is refused -----------------------------
MODEL = ModelConfig(
    name="gen", version=1, framework="python", path=Path("."),
    inputs=(TensorSpec("text_input", "BYTES", (-1, 1)),),
)  # fmt: skip
PARAMETERS = st.fixed_dictionaries(
    {},
    optional={
        "timeout": st.sampled_from([1, 0.5, 0, -1, True, "1", None]),
        "slo_ms": st.sampled_from([1, 0, -3, None, "x"]),
        "priority": st.sampled_from([0, 2, -1, 1.5, False, None]),
        "ttft_ms": st.sampled_from([5, 0, -1, None, True]),
        "tpot_ms": st.sampled_from([5, 0, None, "5"]),
        "max_tokens": st.sampled_from([1, 0, 2.0, None, True]),
        "temperature": st.sampled_from(ANY),
    },
)


@settings(max_examples=300, deadline=None)
@given(parameters=PARAMETERS | st.sampled_from(ANY))
def test_infer_parameters_are_valid_exactly_when_taken(parameters: Any) -> None:
    schema = validator("InferRequest").schema["components"]["schemas"]["InferRequest"]
    parameters_schema = schema["properties"]["parameters"]
    valid = Draft4Validator(parameters_schema).is_valid(parameters)
    taken = True
    try:
        head = infer_head(orjson.dumps({"inputs": [], "parameters": parameters}))
        if head.get("parameters"):
            schedule_policy(head["parameters"])
    except InvalidInput:
        taken = False
    assert valid == taken, parameters


@settings(max_examples=400, deadline=None)
@given(
    parameters=PARAMETERS | st.sampled_from(ANY),
    max_tokens=st.sampled_from([1, 4, 0, -1, 1.0, True, "2", None]),
    with_tokens=st.booleans(),
    extra=st.sampled_from([{}, {"id": 3}, {"temperature": "hot"}, {"text": "x"}]),
)
def test_a_generate_request_the_document_refuses_is_refused(
    parameters: Any, max_tokens: Any, with_tokens: bool, extra: dict[str, Any]
) -> None:
    raw = {"text_input": "once", "parameters": parameters, **extra}
    if with_tokens:
        raw["max_tokens"] = max_tokens
    if validator("GenerateRequest").is_valid(raw):
        return
    with pytest.raises(InvalidInput):
        _, taken = generate.parse(orjson.dumps(raw), MODEL)
        schedule_policy(taken)


# -- the events ------------------------------------------------------------------------------
def _events(path: str) -> list[Draft4Validator]:
    """The documented kinds of one route's events' `data`, each a validator."""
    media = OPENAPI["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]
    data = media["schema"]["properties"]["data"]
    listed = next(kind for kind in data.get("anyOf", [data]) if "contentSchema" in kind)
    components = _draft4(OPENAPI["components"])
    return [
        Draft4Validator({**ref, "components": components})
        for ref in listed["contentSchema"]["oneOf"]
    ]


def _fits(path: str, data: bytes) -> bool:
    document = orjson.loads(data)
    return any(kind.is_valid(document) for kind in _events(path))


def test_the_documented_events_describe_the_events_sent() -> None:
    part = {"text_output": np.array([b"tok "], dtype=object)}
    events = GenerateEvents("gen", 1, "/v2/models/gen/generate_stream")
    assert _fits("/v2/models/{name}/generate_stream", events.part(part)[6:-2])
    failed = events.error("it broke", ModelError.reason)[6:-2]
    assert failed == error_json("it broke", "model_error")
    assert _fits("/v2/models/{name}/generate_stream", failed)
    assert _fits("/v2/models/{name}/infer", failed)
    assert not _fits("/v2/models/{name}/generate_stream", b'{"error": "no reason"}')
    for chat, path in ((False, "/v1/completions"), (True, "/v1/chat/completions")):
        request = completions.parse(
            orjson.dumps({"model": "gen", "stream": True, "max_tokens": 1,
                          "stream_options": {"include_usage": True},
                          **({"messages": [{"role": "user", "content": "x"}]} if chat
                             else {"prompt": "x"})}), chat=chat)  # fmt: skip
        chunks = CompletionEvents(request)
        sent = chunks.part(part) + chunks.end({}) + chunks.error("it broke", "worker_failed")
        datas = [line[6:] for line in sent.split(b"\n") if line.startswith(b"data: ")]
        assert b"[DONE]" in datas
        for data in datas:
            if data != b"[DONE]":
                assert _fits(path, data), (path, data)
