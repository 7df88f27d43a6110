"""An inference request's `parameters` that steer its scheduling (the protocol's
`schedule_policy` extension), read alike by every transport: REST, gRPC and the quick
refusals that look at a request before it is decoded."""

from __future__ import annotations

from typing import Any

from headway.errors import InvalidInput

#: The policy of a request without parameters: its model's SLO, the default priority.
NO_POLICY: tuple[float | None, int | None] = (None, None)


def schedule_policy(parameters: dict[str, Any]) -> tuple[float | None, int | None]:
    """Triton's `timeout` (µs) or Headway's `slo_ms` as the deadline; `priority` (1 = highest).
    Asked of every request that has parameters: no loop, no call for a key not given."""
    if not isinstance(parameters, dict):
        raise InvalidInput("'parameters' must be an object")
    timeout: float | None = None
    if "timeout" in parameters:
        timeout = _positive("timeout", parameters["timeout"]) * 1e-6
    elif "slo_ms" in parameters:
        timeout = _positive("slo_ms", parameters["slo_ms"]) * 1e-3
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
