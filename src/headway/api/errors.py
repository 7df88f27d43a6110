"""The one table from Headway errors to HTTP statuses, the one shape of an error answer, and
what any route answers when it raised."""

from __future__ import annotations

import logging
from collections.abc import Callable

import orjson

from headway.api.limits import UnsupportedEncoding
from headway.errors import (
    ConfigError,
    HeadwayError,
    InvalidInput,
    ModelError,
    ModelNotFound,
    Overloaded,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
)

_STATUS: tuple[tuple[type[HeadwayError], int], ...] = (
    (PayloadTooLarge, 413),
    (UnsupportedEncoding, 415),
    (InvalidInput, 400),
    (ConfigError, 400),
    (ModelNotFound, 404),
    (Unauthorized, 401),
    (Overloaded, 429),
    (Unavailable, 503),
    (ModelError, 500),
)


#: The reason of an error that is a bug (a stream's last event names it too).
INTERNAL_REASON = "internal"


def http_status(error: HeadwayError) -> int:
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500


Headers = list[tuple[bytes, bytes]]
Response = tuple[int, bytes, Headers]  # status, body, headers

JSON: Headers = [(b"content-type", b"application/json")]
#: How a request's answer reaches its connection: called once, with (status, body, headers).
Reply = Callable[[Response], None]

log = logging.getLogger("headway.http")


def error_json(message: str, reason: str | None = None) -> bytes:
    """The JSON of every error, an answer's body or the event that ends a stream in error:
    the protocol's `error`, which Triton's clients read, and, where the error has one, its
    `reason` (`headway.errors`: each class's own, `internal` for a bug; a quick refusal's
    finer `late`, `backlog`, `shed`), by which a program tells refusals apart without reading
    the text and Headway's client raises the same class (`headway.errors.error_for_reason`)."""
    if reason is None:
        return orjson.dumps({"error": message})
    return orjson.dumps({"error": message, "reason": reason})


def problem(status: int, message: str, reason: str | None = None) -> Response:
    """The protocol's error answer: `{"error": message, "reason": reason}` with `status`."""
    return status, error_json(message, reason), JSON


def method_not_allowed(method: str, allowed: tuple[str, ...]) -> Response:
    """405 with the `Allow` header that RFC 9110 requires, naming the methods the route takes."""
    status, body, headers = problem(
        405, f"method {method} not allowed here; use {' or '.join(allowed)}"
    )
    return status, body, [*headers, (b"allow", ", ".join(allowed).encode())]


def error_response(error: HeadwayError) -> Response:
    return problem(http_status(error), error.message, error.reason)


class NoRoute(Exception):
    """No route answers this method and path (404)."""


class WrongMethod(Exception):
    """The route exists but takes another method (405)."""

    def __init__(self, method: str, allowed: str) -> None:
        super().__init__(method, allowed)
        self.method = method
        self.allowed = allowed


def expect(method: str, allowed: str) -> None:
    """Raise WrongMethod unless the request's `method` is the route's."""
    if method != allowed:
        raise WrongMethod(method, allowed)


def failure(error: Exception, method: str, path: str) -> Response:
    """The answer to a request that raised `error`: its status and message (a bug is logged and
    answered 500: the server never crashes on one request)."""
    if isinstance(error, HeadwayError):
        return error_response(error)
    if isinstance(error, NoRoute):
        return problem(404, str(error))
    if isinstance(error, WrongMethod):
        return method_not_allowed(error.method, (error.allowed,))
    log.error("internal error on %s %s", method, path, exc_info=error)
    return problem(500, f"internal error: {type(error).__name__}: {error}", INTERNAL_REASON)
