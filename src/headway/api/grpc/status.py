"""The one table from Headway errors to gRPC status codes (REST's is `api.errors`)."""

from __future__ import annotations

import grpc

from headway.api.limits import AnswerTooLarge
from headway.errors import (
    ConfigError,
    DeadlineUnmeetable,
    HeadwayError,
    InvalidInput,
    ModelError,
    ModelNotFound,
    Overloaded,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
)

_CODES: tuple[tuple[type[HeadwayError], grpc.StatusCode], ...] = (
    (PayloadTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    # what gRPC itself answers for a message over its size limit
    (AnswerTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (InvalidInput, grpc.StatusCode.INVALID_ARGUMENT),
    (ConfigError, grpc.StatusCode.INVALID_ARGUMENT),
    (ModelNotFound, grpc.StatusCode.NOT_FOUND),
    (Unauthorized, grpc.StatusCode.UNAUTHENTICATED),
    (Overloaded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    # rejected early because its deadline cannot be met: what a gRPC client's own deadline
    # would have ended in, said before the time is spent
    (DeadlineUnmeetable, grpc.StatusCode.DEADLINE_EXCEEDED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (ModelError, grpc.StatusCode.INTERNAL),
)


def grpc_status(error: HeadwayError) -> grpc.StatusCode:
    for kind, code in _CODES:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL
