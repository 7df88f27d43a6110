"""Triton's generate extension: `POST /v2/models/{m}[/versions/{v}]/generate` answers one JSON
object, `/generate_stream` server-sent events, one `data:` chunk per part.

The request is one JSON object: each key that names one of the model's inputs is that input
(a value or a list, one row: `{"text_input": "Once upon"}`), `parameters` holds the request's
parameters (`timeout`, `slo_ms`, `priority`, `ttft_ms`, `tpot_ms` steer its scheduling; any
other reaches the model), and the usual generation options (`max_tokens`, `temperature`, ...)
may also stand beside the inputs, as Triton's examples send them; any other key is a 400
naming the model's inputs. An answer is `{"model_name", "model_version", <output>: value}`
per part; `/generate` joins a text output's parts into one string and keeps the last part of
any other. Errors before the stream are Triton's `{"error": "..."}` with their status; an error
after it is a last event `data: {"error": "...", "reason": "..."}`: Triton's, with the
reason by which Headway's client raises the error's own class (`api.errors.error_json`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from headway.api.errors import Reply, Response, error_json, failure
from headway.api.parameters import schedule_policy, streamed_request
from headway.api.sse import event
from headway.api.streamed import GatheredReply, StreamedReply
from headway.api.text import MAX_PROMPT_BYTES, check_prompt
from headway.control.controller import Controller
from headway.control.request import Tensors
from headway.datatypes import numpy_dtype
from headway.errors import InvalidInput
from headway.repository import ModelConfig

#: Generation options taken beside the inputs (into `parameters`) when no input has the name.
OPTIONS = frozenset({
    "max_tokens", "min_tokens", "temperature", "top_p", "top_k", "seed", "stop",
    "presence_penalty", "frequency_penalty", "repetition_penalty",
})  # fmt: skip


def parse(
    body: bytes, model: ModelConfig, max_prompt: int = MAX_PROMPT_BYTES
) -> tuple[Tensors, dict[str, Any]]:
    """A generate request's inputs (one row each) and parameters; InvalidInput names what is
    wrong, PayloadTooLarge a text input over the prompt limit."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InvalidInput("a generate request is a JSON object of inputs and 'parameters'")
    parameters = raw.pop("parameters", None)
    if parameters is None:
        parameters = {}
    elif not isinstance(parameters, dict):
        raise InvalidInput("'parameters' must be an object")
    raw.pop("id", None)
    specs = {spec.name: spec for spec in model.inputs}
    inputs: Tensors = {}
    for key, value in raw.items():
        spec = specs.get(key)
        if spec is None:
            if key in OPTIONS:
                _check_option(key, value)
                parameters.setdefault(key, value)
                continue
            raise InvalidInput(f"model {model.name!r} has no input {key!r}; its inputs are "
                               f"{sorted(specs)}, and options go in 'parameters'")  # fmt: skip
        inputs[key] = _tensor(key, value, spec.datatype, len(spec.shape), max_prompt)
    missing = sorted(set(specs) - set(inputs))
    if missing:
        raise InvalidInput(f"model {model.name!r} needs inputs {missing}")
    if "max_tokens" in parameters:
        _check_option("max_tokens", parameters["max_tokens"])
    return inputs, parameters


def _check_option(key: str, value: Any) -> None:
    """`max_tokens`, the option the server reads itself, is a count of parts, wherever it
    stands (any model, so the route refuses alike what a generative one would); the model
    reads the others as it likes."""
    if key == "max_tokens" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidInput(f"'max_tokens' must be an integer >= 1, got {value!r}")


def _tensor(name: str, value: Any, datatype: str, rank: int, max_prompt: int) -> np.ndarray:
    """One input's row: a value, or a list of values, with the batch dimension in front."""
    if datatype == "BYTES":
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            raise InvalidInput(f"input {name!r} is BYTES: send a string or a list of strings")
        encoded = [v.encode() for v in values]
        check_prompt(b"".join(encoded), max_prompt)
        array: np.ndarray = np.empty(len(encoded), dtype=object)
        array[:] = encoded
        if not isinstance(value, list):
            array = array.reshape(())
    else:
        try:
            array = np.asarray(value, dtype=numpy_dtype(datatype))
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidInput(f"input {name!r} is {datatype}: {exc}") from None
        if array.dtype == object:
            raise InvalidInput(f"input {name!r} is {datatype}: send numbers")
    array = array[None]
    while array.ndim < rank:  # a value for a [-1, 1] input: one row of one
        array = array[..., None]
    return array


def _value(array: np.ndarray) -> Any:
    """An output's row as JSON: a string, a number or a list (the batch dimension dropped)."""
    row = array[0] if array.ndim else array
    if isinstance(row, np.ndarray):
        if row.dtype == object:
            items = [_text(v) for v in row.flat]
            return items[0] if len(items) == 1 else items
        return row.item() if row.size == 1 else row.tolist()
    return _text(row) if isinstance(row, bytes | str) else np.asarray(row).item()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class GenerateEvents:
    """generate_stream's events (`api.streamed.Events`), and `/generate`'s gathered answer."""

    __slots__ = ("gathered", "model", "path", "texts", "version")

    def __init__(self, model: str, version: int, path: str) -> None:
        self.model = model
        self.version = version
        self.path = path
        self.gathered: dict[str, Any] = {}
        self.texts: dict[str, list[str]] = {}

    def _answer(self, outputs: Tensors) -> dict[str, Any]:
        answer: dict[str, Any] = {"model_name": self.model, "model_version": str(self.version)}
        for name, array in outputs.items():
            answer[name] = _value(array)
        return answer

    def part(self, outputs: Tensors) -> bytes:
        return event(orjson.dumps(self._answer(outputs)))

    def end(self, outputs: Tensors) -> bytes:
        return self.part(outputs) if outputs else b""

    def error(self, message: str, reason: str) -> bytes:
        return event(error_json(message, reason))

    def refusal(self, error: Exception) -> Response:
        return failure(error, "POST", self.path)

    # -- answered whole -------------------------------------------------------------------
    def gather(self, outputs: Tensors) -> None:
        for name, value in self._answer(outputs).items():
            if isinstance(value, str) and outputs.get(name) is not None:
                self.texts.setdefault(name, []).append(value)
            else:
                self.gathered[name] = value

    def whole(self) -> bytes:
        if not self.gathered and not self.texts:  # a model that made no part
            self.gathered.update(self._answer({}))
        answer = dict(self.gathered)
        answer.update({name: "".join(parts) for name, parts in self.texts.items()})
        return orjson.dumps(answer)


class GenerateRoute:
    """`/generate` and `/generate_stream` over a controller."""

    def __init__(self, controller: Controller, max_prompt: int = MAX_PROMPT_BYTES) -> None:
        self.controller = controller
        self.max_prompt = max_prompt

    def generate(
        self,
        name: str,
        version: str | None,
        body: bytes,
        received: float | None,
        reply: Reply,
        *,
        stream: bool,
        path: str,
    ) -> None:
        """Admit the request or raise a HeadwayError; `reply` is called with its answer."""
        controller = self.controller
        model = controller.model(name, version).config
        inputs, parameters = parse(body, model, self.max_prompt)
        timeout, priority = schedule_policy(parameters)
        events = GenerateEvents(name, model.version, path)
        receiver: StreamedReply | GatheredReply
        receiver = (
            StreamedReply(controller, reply, events) if stream else GatheredReply(reply, events)
        )
        admitted = streamed_request(
            name, version, parameters,
            timeout=timeout, priority=priority, arrival=received, inputs=inputs,
        )  # fmt: skip
        ticket = controller.submit(admitted, receiver)
        if isinstance(receiver, StreamedReply):
            receiver.submitted(ticket)
