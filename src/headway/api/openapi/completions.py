"""OpenAI's completions API over text generators (`api/completions.py`): `/v1/models`,
`/v1/completions`, `/v1/chat/completions`, answered whole or (`stream: true`) as server-sent
events; every error in OpenAI's shape. The request schemas are what `completions.parse`
takes, key for key: an argument it refuses is one they refuse."""

from __future__ import annotations

from typing import Any

from headway.api.completions import MAX_MESSAGES, MAX_STOP, MAX_STOP_BYTES, ROLES
from headway.api.openapi.events import event_stream
from headway.api.openapi.generate import POSITIVE
from headway.api.openapi.parts import json_body, request_body, schema_ref

OPENAI_ERROR = json_body(schema_ref("OpenAIError"), "Error, in OpenAI's shape")
_REFUSALS = {status: OPENAI_ERROR for status in ("400", "404", "413", "429", "500", "503")}


def completion_routes() -> dict[str, Any]:
    return {
        "/v1/models": {
            "get": {
                "summary": "The text generators (OpenAI)",
                "responses": {"200": json_body(schema_ref("OpenAIModels"))},
            }
        },
        "/v1/completions": _completion(
            "Completion (OpenAI)", "Completion", "CompletionChunk",
            {"model": "tiny-gpt", "prompt": "Once upon a time", "max_tokens": 8},
        ),
        "/v1/chat/completions": _completion(
            "Chat completion (OpenAI)", "ChatCompletion", "ChatCompletionChunk",
            {"model": "tiny-gpt", "max_tokens": 8,
             "messages": [{"role": "user", "content": "Say something"}]},
        ),
    }  # fmt: skip


def _completion(summary: str, kind: str, chunk: str, example: dict[str, Any]) -> dict[str, Any]:
    answer = schema_ref(f"{kind}Answer")
    body = request_body(schema_ref(f"{kind}Request"))
    body["content"]["application/json"]["examples"] = {
        "whole": {"summary": "answered whole", "value": example},
        "streamed": {"summary": "answered as events", "value": {**example, "stream": True,
                     "stream_options": {"include_usage": True}}},
    }  # fmt: skip
    return {
        "post": {
            "summary": summary,
            "requestBody": body,
            "responses": {
                "200": {
                    "description": "The whole answer; with `stream: true`, its chunks as "
                    "events, then `data: [DONE]` (an error after the first chunk: a last "
                    "event in OpenAI's error shape, its `code` the error's reason)",
                    "content": {
                        **json_body(answer)["content"],
                        **event_stream(
                            f"`data: <{chunk}>` per part, the last with `finish_reason` (and "
                            "one with `usage` if stream_options.include_usage), then `data: "
                            "[DONE]`; or `data: <OpenAIError>` last",
                            chunk,
                            "OpenAIError",
                            done=True,
                        ),
                    },
                },
                **_REFUSALS,
            },
        }
    }


def _only(value: Any, why: str) -> dict[str, Any]:
    """An argument the server cannot honour: only `value` (or null) is taken."""
    kind = {bool: "boolean", int: "integer"}.get(type(value))
    taken = [None] if value is None else [value, None]
    schema: dict[str, Any] = {"nullable": True, "enum": taken, "description": why}
    return schema if kind is None else {"type": kind, **schema}


def _number(low: float, high: float) -> dict[str, Any]:
    return {"type": "number", "minimum": low, "maximum": high, "nullable": True}


def _answer(kind: str, choice: dict[str, Any], chunk: bool = False) -> dict[str, Any]:
    """A completion (`kind`) answered whole, or one chunk of it, with its choice's fields."""
    count = {"type": "integer", "minimum": 0}
    usage = {
        "type": "object",
        "nullable": chunk,  # a chunk's is null but the usage chunk's (include_usage)
        "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
        "properties": {"prompt_tokens": count, "completion_tokens": count, "total_tokens": count},
    }
    return {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": [kind]},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {
                "type": "array",
                "maxItems": 1,
                "items": {
                    "type": "object",
                    "required": ["index", "finish_reason", *choice],
                    "properties": {
                        "index": {"type": "integer", "enum": [0]},
                        "logprobs": {"nullable": True, "enum": [None]},
                        "finish_reason": {
                            "type": "string",
                            "nullable": chunk,  # null but on the last chunk
                            "description": "the model's own, else `length` at max_tokens, "
                            "else `stop`",
                        },
                        **choice,
                    },
                },
            },
            "usage": usage,
        },
    }


_STOP = {"type": "string", "maxLength": MAX_STOP_BYTES}
_INTEGER = {"type": "integer", "nullable": True}
_TOKENS = {"type": "integer", "minimum": 1, "nullable": True}

#: The arguments both requests take (`completions._COMMON`).
_COMMON: dict[str, Any] = {
    "model": {"type": "string", "minLength": 1, "description": "a text generator's name"},
    "max_tokens": {**_TOKENS, "description": "at most the model's max_parts; completions "
                   "default to 16, chats to the model's max_parts"},
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    "n": _only(1, "one choice per request"),
    "stream": {"type": "boolean", "nullable": True},
    "stream_options": {
        "type": "object", "nullable": True, "additionalProperties": False,
        "properties": {"include_usage": {"type": "boolean", "nullable": True}},
    },
    "stop": {
        "nullable": True,
        "description": f"a string or at most {MAX_STOP}, each of at most {MAX_STOP_BYTES} "
        "bytes (UTF-8)",
        "anyOf": [_STOP, {"type": "array", "maxItems": MAX_STOP, "items": _STOP}],
    },
    "seed": _INTEGER,
    "user": {"type": "string", "nullable": True},
    "presence_penalty": _number(-2, 2),
    "frequency_penalty": _number(-2, 2),
    "logit_bias": {"type": "object", "nullable": True, "maxProperties": 0,
                   "description": "not supported: empty or null"},
    "ttft_ms": {**POSITIVE, "nullable": True, "description": "Headway's: the target to the "
                "first part, milliseconds"},
    "tpot_ms": {**POSITIVE, "nullable": True, "description": "Headway's: the target per part "
                "after the first, milliseconds"},
    "priority": {"type": "integer", "minimum": 0, "nullable": True,
                 "description": "Headway's: 1 is the highest"},
    "parameters": {"type": "object", "description": "Headway's: options passed to the model "
                   "as they are (the named arguments win over its keys)"},
}  # fmt: skip

_TEXT_PART = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
}

COMPLETION_SCHEMAS: dict[str, Any] = {
    "CompletionRequest": {
        "type": "object",
        "required": ["model", "prompt"],
        "additionalProperties": False,
        "properties": {
            **_COMMON,
            "prompt": {
                "description": "one prompt (a list holds exactly one)",
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "string"}},
                ],
            },
            "echo": _only(False, "not supported"),
            "logprobs": _only(False, "not supported"),
            "best_of": _only(1, "one choice per request"),
            "suffix": _only(None, "not supported"),
        },
    },
    "ChatCompletionRequest": {
        "type": "object",
        "required": ["model", "messages"],
        "additionalProperties": False,
        "properties": {
            **_COMMON,
            "messages": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_MESSAGES,
                "description": "one prompt: a line `role: content` each, then `assistant:`",
                "items": {
                    "type": "object",
                    "required": ["role"],
                    "properties": {
                        "role": {"type": "string", "enum": list(ROLES)},
                        "content": {
                            "nullable": True,
                            "anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_PART}],
                        },
                    },
                },
            },
            "max_completion_tokens": {**_TOKENS, "description": "max_tokens' newer name"},
            "logprobs": _only(False, "not supported"),
            "top_logprobs": _only(None, "not supported"),
        },
    },
    "CompletionAnswer": _answer("text_completion", {"text": {"type": "string"}}),
    "ChatCompletionAnswer": _answer(
        "chat.completion",
        {
            "message": {
                "type": "object",
                "required": ["role", "content"],
                "properties": {
                    "role": {"type": "string", "enum": ["assistant"]},
                    "content": {"type": "string"},
                },
            }
        },
    ),
    "CompletionChunk": _answer("text_completion", {"text": {"type": "string"}}, chunk=True),
    "ChatCompletionChunk": _answer(
        "chat.completion.chunk",
        {
            "delta": {
                "type": "object",
                "properties": {
                    "role": {"type": "string", "enum": ["assistant"]},
                    "content": {"type": "string"},
                },
            }
        },
        chunk=True,
    ),
    "OpenAIModels": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "object"],
                    "properties": {
                        "id": {"type": "string"},
                        "object": {"type": "string"},
                        "created": {"type": "integer"},
                        "owned_by": {"type": "string"},
                    },
                },
            },
        },
    },
    "OpenAIError": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": "string", "nullable": True},
                    "code": {
                        "type": "string",
                        "nullable": True,
                        "description": "the error's reason (headway.errors)",
                    },
                },
            }
        },
    },
}
