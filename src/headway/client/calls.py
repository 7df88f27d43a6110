"""What each client operation sends and how it reads the answer, shared by `Client` and
`AsyncClient`, which differ only in how they send and wait (`Tries` is the retry loop's
logic, without I/O)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
import numpy as np
import orjson

from headway.client.codec import DONE, Answer, decode_infer, encode_infer, error_for, event_of
from headway.client.retry import RETRIED, Retry
from headway.errors import HeadwayError, Unavailable

T = TypeVar("T")

#: How long past a call's own deadline the client waits for the server to say it missed it.
GRACE_S = 1.0

#: The request of one try, given the seconds left to its deadline (None: no deadline).
Build = Callable[[float | None], tuple[bytes, dict[str, str]]]


@dataclass
class ClientCall(Generic[T]):
    """One operation: how to build each try's request, how to read a 200, and the seconds
    from the first try by which its answer is due (None: the server's default deadline)."""

    method: str
    path: str
    build: Build
    read: Callable[[httpx.Response], T]
    deadline: float | None = None
    #: The statuses `read` reads; any other is an error (or, 429 and 503, a try again).
    settles: tuple[int, ...] = (200,)


class Tries:
    """One call's retries: what to send next, and after a refusal whether to try again."""

    def __init__(
        self, call: ClientCall[Any], retry: Retry, on_retry: Callable[[str], None]
    ) -> None:
        self.call = call
        self.retry = retry
        self.on_retry = on_retry
        self.started = time.monotonic()
        self.attempt = 0

    def next_request(self, timeout: float) -> dict[str, Any]:
        """httpx's `request` arguments for the next try (its deadline: what is left)."""
        self.attempt += 1
        left = None
        if self.call.deadline is not None:
            left = self.call.deadline - (time.monotonic() - self.started)
            if left <= 0:
                raise self._final(Unavailable("its deadline passed"))
            timeout = left + GRACE_S
        content, headers = self.call.build(left)
        return {
            "method": self.call.method,
            "url": self.call.path,
            "content": content,
            "headers": headers,
            "timeout": timeout,
        }

    def wait_after(self, response: httpx.Response | None, error: Exception | None) -> float:
        """After a try that was refused (`response`) or could not connect (`error`): the
        seconds to wait before the next, or raise the error the refusal means."""
        if response is not None:
            refusal = error_for(response.status_code, response.content)
            if response.status_code not in RETRIED:
                raise refusal
            what = f"{response.status_code} {refusal.message}"
            wait = self.retry.wait(self.attempt, response.headers.get("retry-after"))
        else:
            refusal = Unavailable(f"cannot reach the server: {error}")
            what = refusal.message
            wait = self.retry.wait(self.attempt)
        deadline = self.call.deadline
        out_of_time = deadline is not None and time.monotonic() + wait > self.started + deadline
        if self.attempt >= self.retry.attempts or out_of_time:
            raise self._final(refusal)
        self.on_retry(f"{what}; retrying in {wait:g} s")
        return wait

    def _final(self, error: HeadwayError) -> HeadwayError:
        tries = f" after {self.attempt} tries" if self.attempt > 1 else ""
        error.message = f"{self.call.method} {self.call.path}{tries}: {error.message}"
        error.args = (error.message,)
        return error


def _json(response: httpx.Response) -> Any:
    return orjson.loads(response.content) if response.content else None


def _ok(response: httpx.Response) -> bool:
    return response.status_code == 200


def named_inputs(inputs: Mapping[str, np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
    """A call's inputs by name: one array alone is the input `input-0`."""
    return {"input-0": inputs} if isinstance(inputs, np.ndarray) else dict(inputs)


def model_path(model: str, version: str | int | None = None) -> str:
    path = f"/v2/models/{quote(model, safe='')}"
    return path if version is None else f"{path}/versions/{quote(str(version), safe='')}"


def infer_call(
    model: str,
    inputs: Mapping[str, np.ndarray] | np.ndarray,
    *,
    version: str | int | None = None,
    outputs: Sequence[str] | None = None,
    timeout: float | None = None,
    priority: int | None = None,
    parameters: Mapping[str, Any] | None = None,
    request_id: str | None = None,
) -> ClientCall[Answer]:
    """An inference; `timeout` (seconds) is its deadline across every try: each try carries
    what is left as Triton's `timeout` parameter, so the server drops it when it cannot."""
    named = named_inputs(inputs)
    fixed = _targets(parameters, priority, None, None)

    def build(left: float | None) -> tuple[bytes, dict[str, str]]:
        wanted = _with_deadline(fixed, left)
        return encode_infer(named, outputs=outputs, parameters=wanted, request_id=request_id)

    return ClientCall(
        "POST",
        f"{model_path(model, version)}/infer",
        build,
        lambda r: decode_infer(r.content, r.headers),
        deadline=timeout,
    )


def get_call(path: str) -> ClientCall[Any]:
    return ClientCall("GET", path, lambda left: (b"", {}), _json)


def ready_call(path: str) -> ClientCall[bool]:
    """A readiness check: True on 200, False when not ready or not there (no retries)."""
    return ClientCall("GET", path, lambda left: (b"", {}), _ok, settles=(200, 400, 404, 503))


def post_call(
    path: str, body: Any = None, headers: dict[str, str] | None = None
) -> ClientCall[Any]:
    content = b"" if body is None else orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    sent = {"content-type": "application/json", **(headers or {})}
    return ClientCall("POST", path, lambda left: (content, sent), _json)


@dataclass
class EventCall(ClientCall[T]):
    """An operation answered as server-sent events: `event` reads each event's data."""

    event: Callable[[bytes], T | None] = lambda data: None

    def part(self, line: str) -> tuple[bool, T | None]:
        """One line of the answer's stream: whether it ends the stream, and the value its
        event carries (None: none; an event that reports an error raises it)."""
        data = event_of(line)
        if data is DONE:
            return True, None
        return False, None if data is None else self.event(data)


def _unread(response: httpx.Response) -> Any:
    raise AssertionError("an event stream is read event by event")


def stream_call(
    model: str,
    inputs: Mapping[str, np.ndarray] | np.ndarray,
    *,
    version: str | int | None = None,
    outputs: Sequence[str] | None = None,
    timeout: float | None = None,
    priority: int | None = None,
    parameters: Mapping[str, Any] | None = None,
    ttft: float | None = None,
    tpot: float | None = None,
) -> EventCall[Answer]:
    """An inference answered in parts (the infer route's events): each part an `Answer`.
    `ttft` and `tpot` (seconds) are its targets to the first part and per part after it."""
    named = named_inputs(inputs)
    fixed = _targets(parameters, priority, ttft, tpot)

    def build(left: float | None) -> tuple[bytes, dict[str, str]]:
        wanted = _with_deadline(fixed, left)
        body, headers = encode_infer(named, outputs=outputs, parameters=wanted,
                                     binary_outputs=False)  # fmt: skip
        return body, {**headers, "accept": "text/event-stream"}

    return EventCall(
        "POST",
        f"{model_path(model, version)}/infer",
        build,
        _unread,
        deadline=timeout,
        event=lambda data: decode_infer(data, {}),
    )


def generate_call(
    model: str,
    prompt: str,
    *,
    version: str | int | None = None,
    stream: bool = True,
    timeout: float | None = None,
    priority: int | None = None,
    ttft: float | None = None,
    tpot: float | None = None,
    **options: Any,
) -> EventCall[str]:
    """A text generator's answer to `prompt` (Triton's generate extension): each part's new
    text (`stream`), or the whole text as one. `options` (`max_tokens`, `temperature`, ...)
    reach the model as parameters."""
    fixed = _targets(options, priority, ttft, tpot)

    def build(left: float | None) -> tuple[bytes, dict[str, str]]:
        wanted = _with_deadline(fixed, left)
        body = orjson.dumps({"text_input": prompt, "parameters": wanted})
        return body, {"content-type": "application/json"}

    route = "generate_stream" if stream else "generate"
    return EventCall(
        "POST",
        f"{model_path(model, version)}/{route}",
        build,
        lambda response: str(orjson.loads(response.content).get("text_output", "")),
        deadline=timeout,
        event=lambda data: orjson.loads(data).get("text_output"),
    )


def _targets(
    parameters: Mapping[str, Any] | None,
    priority: int | None,
    ttft: float | None,
    tpot: float | None,
) -> dict[str, Any]:
    fixed = dict(parameters or {})
    if priority is not None:
        fixed["priority"] = priority
    if ttft is not None:
        fixed["ttft_ms"] = ttft * 1e3
    if tpot is not None:
        fixed["tpot_ms"] = tpot * 1e3
    return fixed


def _with_deadline(fixed: dict[str, Any], left: float | None) -> dict[str, Any]:
    """A try's parameters: the call's, and what is left of its deadline as Triton's
    `timeout` (microseconds, at least 1)."""
    return fixed if left is None else {**fixed, "timeout": max(1, int(left * 1e6))}
