"""The errors Headway raises, as one small tree (`HeadwayError`).

Transports map them to status codes in one table (`headway.api.errors`); nothing here knows
about HTTP.
"""

from __future__ import annotations


class HeadwayError(Exception):
    """Base of every error that Headway reports to a user.

    HeadwayError
     ├── InvalidInput          the request is wrong: fix it and retry        (HTTP 400)
     │    └── PayloadTooLarge  the body is over the configured limit         (HTTP 413)
     ├── ModelNotFound         no such model or version                      (HTTP 404)
     ├── ConfigError           a model.yaml or setting cannot be used        (HTTP 400)
     ├── Unauthorized          the server's token is missing or wrong        (HTTP 401)
     ├── Unavailable           try again later                               (HTTP 503)
     │    ├── ModelNotReady    the model is not loaded (the reason says why)
     │    ├── WorkerFailed     the worker running it died or failed
     │    ├── DeadlineUnmeetable  the deadline cannot be met: rejected early
     │    │    ├── ColdStartTooSlow  the model cannot be loaded in time
     │    │    ├── Backlogged        the work queued ahead would make it late
     │    │    ├── SequencesFull     a generative model's sequences are all taken
     │    │    └── PartTargetUnmeetable  its per-part target is below a step
     │    └── Shed             the server is behind reading requests
     ├── Overloaded            queue full: shed at once                      (HTTP 429)
     └── ModelError            the model itself raised while predicting      (HTTP 500)
          └── ModelStopped     stopped by the server (a race's loser), `cpu_s` spent"""

    reason = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(HeadwayError):
    """The request is malformed or does not match the model's signature."""

    reason = "invalid_input"


class PayloadTooLarge(InvalidInput):
    """The request body exceeds the server's limit."""

    reason = "payload_too_large"


class ModelNotFound(HeadwayError):
    """No model (or version) by that name is in the repository."""

    reason = "not_found"


class ConfigError(HeadwayError):
    """A model.yaml, an app or a setting cannot be used as written."""

    reason = "config"


class Unauthorized(HeadwayError):
    """The server needs a token (`--inference-token`, `--admin-token`) that was not sent,
    or not the server's."""

    reason = "unauthorized"


class Unavailable(HeadwayError):
    """The request cannot be served now; retrying later may succeed."""

    reason = "unavailable"


class ModelNotReady(Unavailable):
    """The model exists but is not loaded, or failed to load."""

    reason = "not_ready"


class WorkerFailed(Unavailable):
    """The worker process executing the request died or could not run it."""

    reason = "worker_failed"


class DeadlineUnmeetable(Unavailable):
    """The request's deadline cannot be met, so it is rejected before running late."""

    reason = "deadline"


class ColdStartTooSlow(DeadlineUnmeetable):
    """The model is not loaded and loading it would miss the deadline."""

    reason = "cold_start"


class Backlogged(DeadlineUnmeetable):
    """The rows queued ahead of the request (or a worker busy with another model) would make
    it late: until its model's queue shrinks, a request due no later is refused the same way."""


class SequencesFull(DeadlineUnmeetable):
    """A generative model's sequence slots (its memory bound, `max_sequences` per worker) are
    all taken, and none would free in time for the request's first part."""

    reason = "sequences_full"


class PartTargetUnmeetable(DeadlineUnmeetable):
    """The request's time-per-part target is below what one step of its model takes."""

    reason = "tpot"


class Shed(Unavailable):
    """The server is behind reading requests: refused at once to keep its own queue short."""

    reason = "shed"


class Overloaded(HeadwayError):
    """The model's queue is full; the request is shed at once."""

    reason = "overloaded"


class ModelError(HeadwayError):
    """The model's own code raised while predicting."""

    reason = "model_error"


class ModelStopped(ModelError):
    """The server stopped the model's action, while it ran or before it started: a race's
    loser (`Engine.stop_action`). `cpu_s`: the CPU seconds it had spent, as its worker
    reported them."""

    def __init__(self, message: str, cpu_s: float = 0.0) -> None:
        super().__init__(message)
        self.cpu_s = cpu_s


def error_for_reason(
    reason: object, message: str, default: type[HeadwayError] = HeadwayError
) -> HeadwayError:
    """The error a `reason` names (an error answer's or a stream's last event's, sent by
    `headway.api`), with `message`: each class's own `reason` is the one table, and where
    several share one (`Backlogged` is a `deadline`), the most general of them answers; a
    reason this tree does not hold (or its root's, `error`) is a `default`."""
    kind = _REASONS.get(reason) if isinstance(reason, str) else None
    return (default if kind is None or kind is HeadwayError else kind)(message)


def _by_reason() -> dict[str, type[HeadwayError]]:
    reasons: dict[str, type[HeadwayError]] = {}
    kinds: list[type[HeadwayError]] = [HeadwayError]
    while kinds:  # breadth first: a parent before the children that share its reason
        kind = kinds.pop(0)
        reasons.setdefault(kind.reason, kind)
        kinds += kind.__subclasses__()
    return reasons


_REASONS = _by_reason()
