"""The one table from Headway errors to HTTP statuses, and the one shape of an error answer."""

from __future__ import annotations

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
    Unavailable,
)

_STATUS: tuple[tuple[type[HeadwayError], int], ...] = (
    (PayloadTooLarge, 413),
    (UnsupportedEncoding, 415),
    (InvalidInput, 400),
    (ConfigError, 400),
    (ModelNotFound, 404),
    (Overloaded, 429),
    (Unavailable, 503),
    (ModelError, 500),
)


def http_status(error: HeadwayError) -> int:
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500


Headers = list[tuple[bytes, bytes]]
Response = tuple[int, bytes, Headers]  # status, body, headers

JSON: Headers = [(b"content-type", b"application/json")]


def problem(status: int, message: str) -> Response:
    """The protocol's error answer: `{"error": message}` with `status`."""
    return status, orjson.dumps({"error": message}), JSON


def method_not_allowed(method: str, allowed: tuple[str, ...]) -> Response:
    """405 with the `Allow` header that RFC 9110 requires, naming the methods the route takes."""
    status, body, headers = problem(
        405, f"method {method} not allowed here; use {' or '.join(allowed)}"
    )
    return status, body, [*headers, (b"allow", ", ".join(allowed).encode())]


def error_response(error: HeadwayError) -> Response:
    return problem(http_status(error), error.message)
