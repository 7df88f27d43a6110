"""An inference request's `parameters` that steer its scheduling (the protocol's
`schedule_policy` extension), read alike by every transport: REST, gRPC and the quick
refusals that look at a request before it is decoded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from headway.control.request import InferenceRequest, Tensors
from headway.errors import InvalidInput

#: The policy of a request without parameters: its model's SLO, the default priority.
NO_POLICY: tuple[float | None, int | None] = (None, None)


def schedule_policy(parameters: dict[str, Any]) -> tuple[float | None, int | None]:
    """Triton's `timeout` (µs) or Headway's `slo_ms` as the deadline (`timeout` wins, each
    checked); `priority` (1 = highest); a stream's targets checked (`stream_targets`), so
    every route refuses the same parameters. Asked of every request that has parameters: no
    loop, no call for a key not given."""
    if not isinstance(parameters, dict):
        raise InvalidInput("'parameters' must be an object")
    timeout: float | None = None
    if "slo_ms" in parameters:
        timeout = _positive("slo_ms", parameters["slo_ms"]) * 1e-3
    if "timeout" in parameters:
        timeout = _positive("timeout", parameters["timeout"]) * 1e-6
    if "ttft_ms" in parameters or "tpot_ms" in parameters:
        stream_targets(parameters)
    priority = parameters.get("priority")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or priority < 0
    ):
        raise InvalidInput(f"parameter 'priority' must be a non-negative integer, got {priority!r}")
    return timeout, priority


def _positive(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidInput(f"parameter {key!r} must be a positive number, got {value!r}")
    return float(value)


#: Parameters the server reads itself; any other reaches the model (a generative model's
#: `start`), such as `max_tokens`, `temperature`, `seed`.
SERVER_PARAMETERS = frozenset({
    "timeout", "slo_ms", "priority", "ttft_ms", "tpot_ms", "binary_data_output",
    "triton_enable_empty_final_response",
})  # fmt: skip


def stream_targets(parameters: dict[str, Any]) -> tuple[float | None, float | None]:
    """A streamed request's own targets: `ttft_ms` (to its first part) and `tpot_ms` (per
    part after it), in seconds; None where not given (the model's defaults apply)."""
    ttft = parameters.get("ttft_ms")
    tpot = parameters.get("tpot_ms")
    return (
        None if ttft is None else _positive("ttft_ms", ttft) * 1e-3,
        None if tpot is None else _positive("tpot_ms", tpot) * 1e-3,
    )


def model_parameters(parameters: dict[str, Any]) -> dict[str, Any] | None:
    """The parameters meant for the model (all but `SERVER_PARAMETERS`); None if none."""
    chosen = {k: v for k, v in parameters.items() if k not in SERVER_PARAMETERS}
    return chosen or None


def streamed_request(
    model: str,
    version: str | None,
    parameters: dict[str, Any],
    *,
    timeout: float | None,
    priority: int | None,
    arrival: float | None,
    inputs: Tensors,
    outputs: Sequence[str] | None = None,
) -> InferenceRequest:
    """A request whose answer streams (the infer route's events, Triton's generate routes):
    its targets and what reaches its model read from its `parameters` alike on each route."""
    ttft, tpot = stream_targets(parameters)
    return InferenceRequest(
        model,
        version=version,
        timeout=timeout,
        priority=priority,
        arrival=arrival,
        inputs=inputs,
        outputs=outputs,
        stream=True,
        ttft=ttft,
        tpot=tpot,
        parameters=model_parameters(parameters),
    )
