"""Headway: prediction serving with deadlines.

Models run in isolated worker processes; a central controller batches requests against their
deadlines and rejects at once what cannot be answered in time. Clients speak the Open Inference
Protocol (KServe v2).
"""

from headway.errors import (
    DeadlineUnmeetable,
    HeadwayError,
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    Overloaded,
    WorkerFailed,
)

__version__ = "0.1.0"

__all__ = [
    "DeadlineUnmeetable",
    "HeadwayError",
    "InvalidInput",
    "ModelNotFound",
    "ModelNotReady",
    "Overloaded",
    "WorkerFailed",
    "__version__",
]
