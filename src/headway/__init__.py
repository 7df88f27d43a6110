"""Headway: prediction serving with deadlines.

Models run in isolated worker processes; a central controller batches requests against their
deadlines and rejects at once what cannot be answered in time. Clients speak the Open Inference
Protocol (KServe v2).
"""

from headway import compiled as _compiled

_compiled.choose()  # before any module of the request path is imported: compiled or pure

from headway.errors import (  # noqa: E402
    DeadlineUnmeetable,
    HeadwayError,
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    Overloaded,
    WorkerFailed,
)

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`headway.Client` and `headway.AsyncClient`, imported when first asked for (a server or
    worker never pays for the client's imports)."""
    if name in ("Client", "AsyncClient"):
        from headway import client

        return getattr(client, name)
    raise AttributeError(f"module 'headway' has no attribute {name!r}")


__all__ = [
    "AsyncClient",
    "Client",
    "DeadlineUnmeetable",
    "HeadwayError",
    "InvalidInput",
    "ModelNotFound",
    "ModelNotReady",
    "Overloaded",
    "WorkerFailed",
    "__version__",
]
