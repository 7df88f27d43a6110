"""Answers sent as server-sent events (`api.sse`): the media type of a streamed answer, the
shape of each event's `data:` JSON, and the event that ends a stream in error.

Before OpenAPI 3.2 (`itemSchema`), a `text/event-stream` media type's `schema` describes one
event, `{data, event, id, retry}` (what schemathesis checks each event against); the JSON its
`data` holds is given by `contentMediaType` and `contentSchema`, one of the document's schemas
per kind of event."""

from __future__ import annotations

from typing import Any

from headway.api.openapi.parts import schema_ref

#: The reasons a stream's error event names (`api.errors.error_json`): an error's own in
#: `headway.errors`, which `headway.Client` raises as that class.
REASONS = (
    "`model_error` (the model raised), `worker_failed` (its worker died), `sequences_full`, "
    "`deadline`, `tpot`, ... (each error's own, `headway.errors`); `internal` (a bug), "
    "`stream_idle` (the server ended a stream that sent nothing for --stream-idle-timeout)"
)

STREAM_ERROR: dict[str, Any] = {
    "type": "object",
    "description": "The last event of a stream that failed after its first part: Triton's "
    "`error`, and the error's `reason`, by which headway.Client raises its class.",
    "required": ["error", "reason"],
    "properties": {
        "error": {"type": "string", "description": "what went wrong, for a person"},
        "reason": {"type": "string", "description": REASONS, "example": "worker_failed"},
    },
}


def event_stream(description: str, *events: str, done: bool = False) -> dict[str, Any]:
    """The `text/event-stream` media type of a streamed answer: each event's `data:` is JSON,
    one of the schemas named in `events` (or, with `done`, OpenAI's last `[DONE]`)."""
    data: dict[str, Any] = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"oneOf": [schema_ref(name) for name in events]},
    }
    if done:
        data = {"anyOf": [{"type": "string", "enum": ["[DONE]"]}, data]}
    return {
        "text/event-stream": {
            "schema": {
                "type": "object",
                "description": description,
                "required": ["data"],
                "properties": {"data": data, "event": {"type": "string"}},
            }
        }
    }
