"""What the model and repository routes answer: a model's metadata (the protocol's), its
configuration (Triton's shape, with Headway's own keys), and the repository index."""

from __future__ import annotations

from typing import Any

from headway.control.controller import Controller
from headway.control.models.states import READY, UNLOADED, ModelState


def metadata(model: ModelState) -> dict[str, Any]:
    config = model.config
    body: dict[str, Any] = {
        "name": config.name,
        "versions": [str(v) for v in config.versions],
        "platform": config.platform,
        "inputs": [t.to_json() for t in config.inputs],
        "outputs": [t.to_json() for t in config.outputs],
        "state": model.state,
    }
    if model.reason:
        body["reason"] = model.reason
    return body


def config(model: ModelState) -> dict[str, Any]:
    config = model.config
    return {
        "name": config.name,
        "platform": config.platform,
        "backend": config.framework,
        "max_batch_size": config.max_batch_size,
        "input": [
            {"name": t.name, "data_type": config_type(t.datatype), "dims": list(t.shape[1:])}
            for t in config.inputs
        ],
        "output": [
            {"name": t.name, "data_type": config_type(t.datatype), "dims": list(t.shape[1:])}
            for t in config.outputs
        ],
        "dynamic_batching": {"max_queue_delay_microseconds": int(config.batch_delay_ms * 1000)},
        "headway": {
            "slo_ms": config.slo_ms,
            "replicas": config.replicas,
            "cache": config.cache,
            "version": config.version,
        },
    }


def config_type(datatype: str) -> str:
    """A protocol datatype as Triton's configuration names it (BYTES is TYPE_STRING there)."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def index(controller: Controller) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    repository = controller.repository
    served = {m.label: m for m in controller.status() if m.default}
    for name in repository.names:
        model = served.get(name)
        entry: dict[str, Any] = {"name": name}
        if model is not None:
            entry.update(version=str(model.version), state=model.state)
            if model.reason:
                entry["reason"] = model.reason
            if model.nodes:  # on a cluster (the Ray engine): which nodes host its replicas
                entry["nodes"] = list(model.nodes)
        elif name in repository.broken:
            entry.update(state="UNAVAILABLE", reason=repository.broken[name])
        else:  # a lazily indexed repository: read and loaded on the first request
            entry.update(state="READY", reason="loads on demand")
        out.append(entry)
    return out


def unready(controller: Controller) -> dict[str, str]:
    """The models the server was asked to serve that do not serve now, each with the reason:
    the repository's models, less those unloaded through the API (Triton's strict readiness).
    A lazily indexed repository's unread models are ready: they load on demand. A model is
    not ready until its first warm-up and sweep of batch sizes end, as Triton warms a model
    before it is ready."""
    out = dict(controller.repository.broken)
    for model in controller.status():
        if not model.default:
            continue
        if model.state not in (READY, UNLOADED):
            out[model.label] = model.reason or model.state.lower()
        elif model.state == READY and model.warming:
            out[model.label] = "warming up (measuring its batch sizes)"
    return dict(sorted(out.items()))
