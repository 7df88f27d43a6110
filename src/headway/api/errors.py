"""The one table from Headway errors to HTTP statuses."""

from __future__ import annotations

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
