"""OpenAI's completions API over text generators (`api.text`), so the `openai` Python client
works unchanged: `POST /v1/completions`, `POST /v1/chat/completions` (each answered whole, or
with `stream: true` as server-sent events: one `data:` chunk per part, then `data: [DONE]`),
and `GET /v1/models` (the text generators).

A request is checked whole before anything runs: a malformed one is a 4xx in OpenAI's error
shape, `{"error": {"message", "type", "param", "code"}}`, naming the argument. Arguments the
server cannot honour (`n` above 1, `logprobs`, `echo`, token-id prompts) are refused, not
ignored. `max_tokens`, `temperature`, `top_p`, `seed`, `stop` and the penalties reach the
model as its request's parameters; Headway's own `ttft_ms`, `tpot_ms` (the stream's targets),
`priority` and `parameters` (an object passed to the model as it is, such as the demo
generator's `ignore_end`; the named arguments win over its keys) may ride along (the `openai`
client's `extra_body`). A chat's messages become one prompt, a line `role: content` each and
`assistant:` last. Usage counts the parts made as completion tokens; the prompt is not
tokenized here, so its count is 0.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from headway.api.errors import JSON, Reply, Response, http_status
from headway.api.sse import event
from headway.api.streamed import GatheredReply, StreamedReply
from headway.api.text import (
    MAX_PROMPT_BYTES,
    TextParts,
    check_prompt,
    is_text_generator,
    max_parts,
    prompt_inputs,
    text_generator,
)
from headway.control.controller import Controller
from headway.control.request import InferenceRequest, Tensors
from headway.errors import HeadwayError, InvalidInput, ModelNotFound

#: OpenAI's own bounds on what a request may carry.
MAX_STOP = 4  # stop sequences
MAX_STOP_BYTES = 1024  # bytes of each
MAX_MESSAGES = 4096  # messages of a chat
ROLES = ("system", "developer", "user", "assistant", "tool")

_COMMON = {
    "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop",
    "seed", "user", "presence_penalty", "frequency_penalty", "logit_bias", "ttft_ms", "tpot_ms",
    "priority", "parameters",
}  # fmt: skip
_COMPLETION = _COMMON | {"prompt", "echo", "logprobs", "best_of", "suffix"}
_CHAT = _COMMON | {"messages", "max_completion_tokens", "logprobs", "top_logprobs"}
#: Arguments passed to the model as its request's parameters.
_PARAMETERS = (
    "max_tokens", "temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty",
)  # fmt: skip
_DONE = event(b"[DONE]")


class OpenAIError(InvalidInput):
    """A request OpenAI's API would refuse: its message names `param`."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class Completion:
    """A completion request, checked (`parse`)."""

    model: str
    prompt: bytes
    chat: bool
    stream: bool = False
    usage_in_stream: bool = False
    max_tokens: int | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    ttft: float | None = None
    tpot: float | None = None
    priority: int | None = None


def parse(body: bytes, chat: bool, max_prompt: int = MAX_PROMPT_BYTES) -> Completion:
    """The request in `body`, or an OpenAIError (a PayloadTooLarge for a prompt over the
    limit) naming what is wrong."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OpenAIError(f"the body is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise OpenAIError("the body must be a JSON object")
    known = _CHAT if chat else _COMPLETION
    for key in raw:
        if key not in known:
            raise OpenAIError(f"Unrecognized request argument supplied: {key}", key)
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError("'model' is required: the name of a text generator", "model")
    prompt = _messages(raw.get("messages")) if chat else _prompt(raw.get("prompt"))
    check_prompt(prompt, max_prompt)
    request = Completion(model, prompt, chat)
    request.stream = _flag(raw, "stream")
    options = raw.get("stream_options")
    if options is not None:
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise OpenAIError("'stream_options' takes only include_usage", "stream_options")
        request.usage_in_stream = _flag(options, "include_usage")
    for key in ("max_tokens", "max_completion_tokens") if chat else ("max_tokens",):
        tokens = raw.get(key)
        if tokens is not None:
            if not _integer(tokens) or tokens < 1:
                raise OpenAIError(f"{key!r} must be an integer >= 1, got {tokens!r}", key)
            if request.max_tokens is None or key == "max_completion_tokens":
                request.max_tokens = tokens  # the newer name wins
    if request.max_tokens is None and not chat:
        request.max_tokens = 16  # OpenAI's default for completions
    _unsupported(raw, chat)
    _range(raw, "temperature", 0.0, 2.0)
    _range(raw, "top_p", 0.0, 1.0)
    _range(raw, "presence_penalty", -2.0, 2.0)
    _range(raw, "frequency_penalty", -2.0, 2.0)
    seed = raw.get("seed")
    if seed is not None and not _integer(seed):
        raise OpenAIError(f"'seed' must be an integer, got {seed!r}", "seed")
    stop = raw.get("stop")
    if stop is not None:
        raw["stop"] = _stop(stop)
    given = raw.get("parameters", {})
    if not isinstance(given, dict):
        raise OpenAIError(
            "'parameters' must be an object: options passed to the model", "parameters"
        )
    parameters = dict(given)
    parameters.update((key, raw[key]) for key in _PARAMETERS if raw.get(key) is not None)
    if request.max_tokens is not None:
        parameters["max_tokens"] = request.max_tokens
    request.parameters = parameters
    request.ttft = _milliseconds(raw, "ttft_ms")
    request.tpot = _milliseconds(raw, "tpot_ms")
    priority = raw.get("priority")
    if priority is not None and (not _integer(priority) or priority < 0):
        raise OpenAIError(f"'priority' must be an integer >= 0, got {priority!r}", "priority")
    request.priority = priority
    return request


def _prompt(prompt: Any) -> bytes:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list):
        raise OpenAIError("'prompt' must be one string: several prompts (or token ids) in one "
                          "request are not supported; send one request each", "prompt")  # fmt: skip
    if not isinstance(prompt, str):
        raise OpenAIError("'prompt' is required: a string", "prompt")
    return prompt.encode()


def _messages(messages: Any) -> bytes:
    if not isinstance(messages, list) or not messages:
        raise OpenAIError("'messages' is required: a non-empty list of messages", "messages")
    if len(messages) > MAX_MESSAGES:
        raise OpenAIError(f"'messages' holds {len(messages)} messages, more than "
                          f"{MAX_MESSAGES}", "messages")  # fmt: skip
    lines = []
    for number, message in enumerate(messages):
        where = f"messages[{number}]"
        if not isinstance(message, dict):
            raise OpenAIError(f"{where} must be an object with 'role' and 'content'", where)
        role = message.get("role")
        if role not in ROLES:
            raise OpenAIError(f"{where}.role must be one of {list(ROLES)}, got {role!r}", where)
        lines.append(f"{role}: {_content(message.get('content'), where)}\n")
    lines.append("assistant:")
    return "".join(lines).encode()


def _content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise OpenAIError(f"{where}.content: only text parts are supported", where)
            text = part.get("text")
            if not isinstance(text, str):
                raise OpenAIError(f"{where}.content: a text part needs 'text'", where)
            texts.append(text)
        return "".join(texts)
    raise OpenAIError(f"{where}.content must be a string or a list of text parts", where)


def _stop(stop: Any) -> list[str]:
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise OpenAIError("'stop' must be a string or a list of strings", "stop")
    if len(stops) > MAX_STOP:
        raise OpenAIError(f"'stop' holds {len(stops)} sequences, more than {MAX_STOP}", "stop")
    if any(len(s.encode()) > MAX_STOP_BYTES for s in stops):
        raise OpenAIError(f"a 'stop' sequence is longer than {MAX_STOP_BYTES} bytes", "stop")
    return stops


def _unsupported(raw: dict[str, Any], chat: bool) -> None:
    for key in ("n", "best_of") if not chat else ("n",):
        value = raw.get(key)
        if value is not None and not (_integer(value) and value == 1):
            raise OpenAIError(f"{key!r} must be 1: one choice per request, got {value!r}", key)
    for key in ("echo", "logprobs") if not chat else ("logprobs",):
        value = raw.get(key)
        if value is not None and value is not False:  # (not 0: a number asks for them)
            raise OpenAIError(f"{key!r} is not supported: leave it out, null or false", key)
    for key in ("suffix", "top_logprobs"):
        if raw.get(key) is not None:
            raise OpenAIError(f"{key!r} is not supported", key)
    bias = raw.get("logit_bias")
    if bias not in (None, {}):
        raise OpenAIError("'logit_bias' is not supported", "logit_bias")
    user = raw.get("user")
    if user is not None and not isinstance(user, str):
        raise OpenAIError("'user' must be a string", "user")


def _flag(raw: dict[str, Any], key: str) -> bool:
    value = raw.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise OpenAIError(f"{key!r} must be true or false, got {value!r}", key)
    return value


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _range(raw: dict[str, Any], key: str, low: float, high: float) -> None:
    value = raw.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise OpenAIError(f"{key!r} must be a number from {low:g} to {high:g}, got {value!r}", key)


def _milliseconds(raw: dict[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise OpenAIError(f"{key!r} must be a positive number of milliseconds", key)
    return float(value) / 1000.0


# -- answers ----------------------------------------------------------------------------------
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error"}  # fmt: skip


def error_body(status: int, message: str, code: str | None, param: str | None = None) -> bytes:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def openai_error(error: Exception) -> Response:
    """Any error as OpenAI answers it (its status from `api.errors`)."""
    if isinstance(error, HeadwayError):
        status = http_status(error)
        code = "model_not_found" if isinstance(error, ModelNotFound) else error.reason
        param = getattr(error, "param", None)
        return status, error_body(status, error.message, code, param), JSON
    return 500, error_body(500, f"internal error: {type(error).__name__}", "internal"), JSON


def openai_shaped(reply: Reply) -> Reply:
    """`reply`, with the server's `{"error": "..."}` answers (a missing token, an unknown
    route, a server starting) rewritten in OpenAI's shape."""

    def answer(response: Response) -> None:
        status, body, headers = response
        if status >= 400 and body[:10] == b'{"error":"':
            message = orjson.loads(body)["error"]
            code = {401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed"}
            body = error_body(status, message, code.get(status, str(status)))
        reply((status, body, headers))

    return answer


class CompletionEvents:
    """A completion's chunks (`api.streamed.Events`), or, unstreamed, its text gathered into
    one answer (`whole`)."""

    __slots__ = ("created", "id", "model", "request", "text", "texts")

    def __init__(self, request: Completion) -> None:
        self.request = request
        self.id = ("chatcmpl-" if request.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = request.model
        self.text = TextParts(request.max_tokens)
        self.texts: list[str] = []

    def _chunk(self, text: str | None, finish: str | None, role: bool = False) -> bytes:
        if self.request.chat:
            delta: dict[str, Any] = {} if text is None else {"content": text}
            if role:
                delta["role"] = "assistant"
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None}
            kind = "text_completion"
        choice["finish_reason"] = finish
        chunk = {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                 "choices": [choice]}  # fmt: skip
        if self.request.usage_in_stream:
            chunk["usage"] = None
        return event(orjson.dumps(chunk))

    def part(self, outputs: Tensors) -> bytes:
        first = self.text.count == 0
        return self._chunk(self.text.text(outputs), None, role=first and self.request.chat)

    def end(self, outputs: Tensors) -> bytes:
        events = self.part(outputs) if outputs else b""
        rest = self.text.rest()
        events += self._chunk(rest if rest else None, self.text.finish_reason)
        if self.request.usage_in_stream:
            usage: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk" if self.request.chat
                     else "text_completion", "created": self.created, "model": self.model,
                     "choices": [], "usage": self.usage()}  # fmt: skip
            events += event(orjson.dumps(usage))
        return events + _DONE

    def error(self, message: str, reason: str) -> bytes:
        return event(error_body(500, message, reason))

    def refusal(self, error: Exception) -> Response:
        return openai_error(error)

    def usage(self) -> dict[str, int]:
        count = self.text.count
        return {"prompt_tokens": 0, "completion_tokens": count, "total_tokens": count}

    # -- answered whole -------------------------------------------------------------------
    def gather(self, outputs: Tensors) -> None:
        self.texts.append(self.text.text(outputs))

    def whole(self) -> bytes:
        text = "".join(self.texts) + self.text.rest()
        finish = self.text.finish_reason
        if self.request.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant",
                                      "content": text}, "logprobs": None}  # fmt: skip
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
            kind = "text_completion"
        choice["finish_reason"] = finish
        return orjson.dumps({"id": self.id, "object": kind, "created": self.created,
                             "model": self.model, "choices": [choice], "usage": self.usage()})  # fmt: skip


class CompletionRoutes:
    """`/v1/...` over a controller (see the module docstring)."""

    def __init__(self, controller: Controller, max_prompt: int = MAX_PROMPT_BYTES) -> None:
        self.controller = controller
        self.max_prompt = max_prompt

    def models(self) -> Response:
        data = [
            {"id": status.label, "object": "model", "created": 0, "owned_by": "headway"}
            for status in self.controller.status()
            if status.default and is_text_generator(status.config)
        ]
        return 200, orjson.dumps({"object": "list", "data": data}), JSON

    def complete(self, body: bytes, chat: bool, received: float | None, reply: Reply) -> None:
        """Answer a completion (never raises: every error is OpenAI's shape)."""
        try:
            self._complete(body, chat, received, reply)
        except Exception as exc:
            reply(openai_error(exc))

    def _complete(self, body: bytes, chat: bool, received: float | None, reply: Reply) -> None:
        request = parse(body, chat, self.max_prompt)
        controller = self.controller
        model = controller.model(request.model).config
        text_generator(model)
        most = max_parts(model)
        if most is not None and request.max_tokens is not None and request.max_tokens > most:
            raise OpenAIError(f"'max_tokens' of {request.max_tokens} exceeds the "
                              f"{most} tokens model {request.model!r} makes at most", "max_tokens")  # fmt: skip
        events = CompletionEvents(request)
        receiver: StreamedReply | GatheredReply
        if request.stream:
            receiver = StreamedReply(controller, reply, events)
        else:
            receiver = GatheredReply(reply, events)
        ticket = controller.submit(
            InferenceRequest(
                request.model,
                arrival=received,
                priority=request.priority,
                inputs=prompt_inputs(model, request.prompt),
                stream=True,
                ttft=request.ttft,
                tpot=request.tpot,
                parameters=request.parameters,
            ),
            receiver,
        )
        if isinstance(receiver, StreamedReply):
            receiver.submitted(ticket)
