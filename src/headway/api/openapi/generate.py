"""Triton's generate extension (`api/generate.py`): `/generate` answered whole and
`/generate_stream` as server-sent events, for a model and for one of its versions."""

from __future__ import annotations

from typing import Any

from headway.api.openapi.events import STREAM_ERROR, event_stream
from headway.api.openapi.parts import ERROR, json_body, request_body, schema_ref

_REFUSALS = {"400": ERROR, "404": ERROR, "413": ERROR, "429": ERROR, "500": ERROR, "503": ERROR}


def generate_routes(prefix: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    body = request_body(schema_ref("GenerateRequest"))
    return {
        f"{prefix}/generate": {
            "post": {
                "summary": "Generate, answered whole (Triton): a text output's parts joined",
                "parameters": params,
                "requestBody": body,
                "responses": {"200": json_body(schema_ref("GenerateAnswer")), **_REFUSALS},
            }
        },
        f"{prefix}/generate_stream": {
            "post": {
                "summary": "Generate, streamed (Triton): one event per part",
                "parameters": params,
                "requestBody": body,
                "responses": {
                    "200": {
                        "description": "The parts as they are made, then the end of the body; "
                        "an error after the first part is a last event naming it.",
                        "content": event_stream(
                            "`data: <GenerateAnswer>` per part; `data: <StreamError>` last, "
                            "for an error after the first part",
                            "GenerateAnswer",
                            "StreamError",
                        ),
                    },
                    **_REFUSALS,
                },
            }
        },
    }


#: A positive number (the deadlines and targets); OpenAPI 3.0's boolean exclusiveMinimum.
POSITIVE: dict[str, Any] = {"type": "number", "minimum": 0, "exclusiveMinimum": True}


def request_parameters(**more: dict[str, Any]) -> dict[str, Any]:
    """A request's `parameters` (`api.parameters`): what steers its scheduling, checked; any
    other key reaches the model as it is. `more`: the route's own checked keys."""
    return {
        "type": "object",
        "nullable": True,
        "description": "The request's parameters: those named here steer its scheduling; any "
        "other reaches the model (a generative model's options, such as max_tokens).",
        "properties": {
            "timeout": {**POSITIVE, "description": "deadline, microseconds (Triton's)"},
            "slo_ms": {**POSITIVE, "description": "deadline, milliseconds (timeout wins)"},
            "priority": {"type": "integer", "minimum": 0, "nullable": True,
                         "description": "1 is the highest; 0 or none: the default"},
            "ttft_ms": {**POSITIVE, "nullable": True,
                        "description": "a stream's target to its first part, milliseconds"},
            "tpot_ms": {**POSITIVE, "nullable": True,
                        "description": "a stream's target per part after the first, ms"},
            **more,
        },
    }  # fmt: skip


MAX_TOKENS: dict[str, Any] = {
    "type": "integer",
    "minimum": 1,
    "description": "the most parts (tokens) to make",
}

GENERATE_SCHEMAS: dict[str, Any] = {
    "GenerateRequest": {
        "type": "object",
        "description": "Each key that names one of the model's inputs is that input, one row "
        "(a value or a list: a string for BYTES); `parameters` as infer's; the generation "
        "options (max_tokens, min_tokens, temperature, top_p, top_k, seed, stop and the "
        "penalties) may stand beside the inputs. Any other key is refused (400, naming the "
        "model's inputs), as is a missing input.",
        "properties": {
            "parameters": request_parameters(max_tokens=MAX_TOKENS),
            "id": {"description": "ignored (Triton's)"},
            "max_tokens": MAX_TOKENS,
        },
        "additionalProperties": {"description": "an input, or a generation option"},
        "example": {"text_input": "Once upon a time", "max_tokens": 8},
    },
    "GenerateAnswer": {
        "type": "object",
        "description": "The model's outputs by name, one row each (the batch dimension "
        "dropped): a string for text, else a number or a list. /generate joins a text "
        "output's parts into one string and keeps the last part of any other; "
        "/generate_stream sends each part's new text.",
        "required": ["model_name", "model_version"],
        "properties": {"model_name": {"type": "string"}, "model_version": {"type": "string"}},
        "additionalProperties": {},
    },
    "StreamError": STREAM_ERROR,
}
