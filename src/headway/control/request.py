"""The seam between the control layer and everything that calls it: one typed request in,
one answer out.

A transport, an application, a flow, the profiler and the simulator describe a call as an
`InferenceRequest` and hand it to the controller's two doors: `Controller.screen` (may it be
refused before its tensors are decoded?) and `Controller.submit` (admit it, and answer it
through a `Receiver`). Nothing else about a request crosses the seam, so the layers above
never see how the controller queues, batches or places it (MLServer's typed
`InferenceRequest` into one `DataPlane`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, final

import numpy as np

Tensors = dict[str, np.ndarray]

#: Triton's priority levels: 1 is the highest; 0 (unset) means the default level.
DEFAULT_PRIORITY = 10


def priority_level(priority: int | None) -> int:
    """Triton's `priority` parameter as a sort level (lower runs first)."""
    return DEFAULT_PRIORITY if not priority or priority < 0 else int(priority)


@final
class InferenceRequest:
    """One call of one model, as its caller knows it.

    `model` and `version` (None: the default version) name what to run; the deadline is
    `timeout` seconds after `arrival` (None: the model's `slo_ms`), and `arrival` is when the
    request reached the server on the controller's clock (None: when the controller is handed
    it). `priority` is Triton's (None or 0: the default level). `inputs` are the decoded
    tensors, None while the request is not decoded yet (what `Controller.screen` sees);
    `outputs` the outputs wanted (None: all). `trace` is the transport's trace of it
    (`api.tracing.Trace`), read only when tracing is on.

    For a model whose answers come in parts (docs/streams.md): `stream` says the caller takes
    each part as it is made (`Receiver.part`); else the parts are gathered into one answer.
    `ttft` and `tpot` are its targets in seconds, time to the first part and time per part
    after it (None: the model's `ttft_ms` and `tpot_ms`; the first part falls back on
    `timeout`, then `slo_ms`). `parameters` reach a generative model's `start` (for example
    `max_tokens`, `temperature`, `seed`).

    Read-only, and a plain class: one is made per call on the request path, where a
    dataclass's generated `__init__` would stay interpreted under `headway.speedups`."""

    __slots__ = (
        "arrival",
        "inputs",
        "model",
        "outputs",
        "parameters",
        "priority",
        "stream",
        "timeout",
        "tpot",
        "trace",
        "ttft",
        "version",
    )

    def __init__(
        self,
        model: str,
        *,
        version: str | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        arrival: float | None = None,
        inputs: Tensors | None = None,
        outputs: Sequence[str] | None = None,
        trace: Any = None,
        stream: bool = False,
        ttft: float | None = None,
        tpot: float | None = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> None:
        self.model: Final = model
        self.version: Final = version
        self.timeout: Final = timeout
        self.priority: Final = priority
        self.arrival: Final = arrival
        self.inputs: Final = inputs
        self.outputs: Final = outputs
        self.trace: Final = trace
        self.stream: Final = stream
        self.ttft: Final = ttft
        self.tpot: Final = tpot
        self.parameters: Final = parameters

    def decoded(
        self, inputs: Tensors, outputs: Sequence[str] | None = None, trace: Any = None
    ) -> InferenceRequest:
        """The same request with its decoded tensors (and its trace, once it has one)."""
        return InferenceRequest(
            self.model,
            version=self.version,
            timeout=self.timeout,
            priority=self.priority,
            arrival=self.arrival,
            inputs=inputs,
            outputs=outputs,
            trace=trace if trace is not None else self.trace,
            stream=self.stream,
            ttft=self.ttft,
            tpot=self.tpot,
            parameters=self.parameters,
        )

    def __repr__(self) -> str:
        inputs = None if self.inputs is None else sorted(self.inputs)
        return (
            f"InferenceRequest({self.model!r}, version={self.version!r}, "
            f"timeout={self.timeout!r}, priority={self.priority!r}, arrival={self.arrival!r}, "
            f"inputs={inputs}" + (", stream=True" if self.stream else "") + ")"
        )


class Prediction:
    """One request's answer: its rows of each output.

    A plain class, not a dataclass: one is made per request, and a dataclass's generated
    `__init__` is interpreted even where this module is compiled (`headway.speedups`)."""

    __slots__ = ("model", "outputs", "version")

    def __init__(self, model: str, version: int, outputs: Tensors) -> None:
        self.model = model
        self.version = version
        self.outputs = outputs

    def __repr__(self) -> str:
        return f"Prediction({self.model!r}, {self.version}, outputs={sorted(self.outputs)})"


class Receiver(Protocol):
    """Where one submitted request's answer goes: the transport's reply, a future, a flow's
    stage. Exactly one of `done` or `fail` is called, once, at the moment the answer is known
    (inside the worker's reply: no loop turn in between), unless the request is withdrawn.

    An answer may come in parts (a streaming or generative model, docs/streams.md). Only a
    request submitted with `stream=True` is told of each: `part` is called with the part's
    rows of each output as it is made, in order, then `done` with no outputs (every part went
    to `part`) or `fail` with what ended the stream (the model's error, its worker's death).
    A model that answers at once gives a streamed request no part, and `done` the whole
    answer. Without `stream`, a streaming model's parts are gathered (`gather`) into the one
    answer `done` is given, and `part` is never called."""

    def part(self, outputs: Tensors) -> None: ...

    def done(self, prediction: Prediction) -> None: ...

    def fail(self, error: Exception) -> None: ...


def gather(parts: Sequence[Tensors]) -> Tensors:
    """One answer from a stream's parts: each output's parts stacked along a new axis 1, so
    its rows stay the request's rows (a row's parts in order along the second dimension). A
    part without an output, or of another shape than the others, cannot be stacked:
    ValueError, naming it."""
    if not parts:
        return {}
    names = list(parts[0])
    gathered: Tensors = {}
    for name in names:
        arrays = []
        for number, part in enumerate(parts):
            array = part.get(name)
            if array is None:
                raise ValueError(f"part {number} has no output {name!r}: parts cannot be gathered")
            arrays.append(array)
        try:
            gathered[name] = np.stack(arrays, axis=1)
        except ValueError:
            shapes = sorted({tuple(a.shape) for a in arrays})
            raise ValueError(
                f"output {name!r} comes in parts of shapes {shapes}, which cannot be gathered "
                "into one answer; ask for a stream"
            ) from None
    return gathered


class Ticket(Protocol):
    """What `Controller.submit` gives back: the submitted request, to withdraw it
    (`Controller.withdraw`) when it is no longer wanted."""

    @property
    def model(self) -> str: ...


class FutureReceiver:
    """A `Receiver` that settles a future, for callers that `await` their answer (apps, flows,
    the profiler); `then(future)`, if given, runs the moment this settles it. Once the future
    is done (cancelled by its awaiter), what comes later is dropped."""

    __slots__ = ("future", "then")

    def __init__(
        self,
        future: asyncio.Future[Prediction],
        then: Callable[[asyncio.Future[Prediction]], None] | None = None,
    ) -> None:
        self.future = future
        self.then = then

    def part(self, outputs: Tensors) -> None:
        raise NotImplementedError("an awaited answer is taken whole: its parts are gathered")

    def done(self, prediction: Prediction) -> None:
        future = self.future
        if not future.done():
            future.set_result(prediction)
            if self.then is not None:
                self.then(future)

    def fail(self, error: Exception) -> None:
        future = self.future
        if not future.done():
            future.set_exception(error)
            if self.then is not None:
                self.then(future)
