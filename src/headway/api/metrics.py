"""Prometheus text for `GET /metrics`, read from the controller's statistics at scrape time.

Per-model series carry `model="<name>"` for a model's default version and `model="<name>@<v>"`
for another version served beside it (`/v2/models/<name>/versions/<v>/...`).

Nothing is observed on the request path here: the core counts, this module only reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from headway.apps import AppRegistry
from headway.control.admission.reasons import (
    DROPPED,
    REFUSED_BY_WORKER,
    REFUSED_UNREAD,
    REJECTED_AT_ADMISSION,
)
from headway.control.controller import Controller
from headway.control.snapshots import ControllerSnapshot
from headway.flows.serving import FlowApplication
from headway.planning.live import LiveTuner


class ControllerCollector:
    """A prometheus_client collector over the controller's statistics (`ControllerSnapshot`)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        snapshot = self.controller.statistics()
        requests = CounterMetricFamily("headway_requests", "Inference requests", labels=["model"])
        errors = CounterMetricFamily(
            "headway_errors", "Failed requests by reason", labels=["model", "reason"]
        )
        hits = CounterMetricFamily("headway_cache_hits", "Prediction cache hits", labels=["model"])
        queue = GaugeMetricFamily("headway_queue_length", "Queued requests", labels=["model"])
        ready = GaugeMetricFamily(
            "headway_model_ready", "1 when the model serves", labels=["model"]
        )
        latency = HistogramMetricFamily(
            "headway_request_latency_seconds", "End-to-end latency", labels=["model"]
        )
        batch = HistogramMetricFamily(
            "headway_batch_size",
            "Clients' rows per INFER action that ran carrying clients' requests",
            labels=["model"],
        )
        late = CounterMetricFamily(
            "headway_late_answers", "Answers delivered after their deadline", labels=["model"]
        )
        waited = HistogramMetricFamily(
            "headway_queue_seconds",
            "Time a request waited from arrival until its batch left for a worker",
            labels=["model"],
        )
        computed = HistogramMetricFamily(
            "headway_compute_seconds", "Time a worker ran an INFER action", labels=["model"]
        )
        measuring = CounterMetricFamily(
            "headway_measuring_runs",
            "INFER actions run to measure the model (warm-up, batch-size sweep, probes), "
            "counted apart from its traffic",
            labels=["model"],
        )
        measuring_rows = CounterMetricFamily(
            "headway_measuring_rows", "Rows of the measuring runs", labels=["model"]
        )
        first_part = HistogramMetricFamily(
            "headway_time_to_first_part_seconds",
            "Time from a streamed request's arrival to its first part (time to first token)",
            labels=["model"],
        )
        part_gap = HistogramMetricFamily(
            "headway_time_per_part_seconds",
            "Time from one part of a stream to the next (time per output token)",
            labels=["model"],
        )
        parts = CounterMetricFamily("headway_parts", "Parts of streams delivered", labels=["model"])
        rate = GaugeMetricFamily(
            "headway_parts_per_second",
            "Parts of streams delivered per second, over the last seconds",
            labels=["model"],
        )
        streams = CounterMetricFamily(
            "headway_streams", "Streams that ended with their last part", labels=["model"]
        )
        running = GaugeMetricFamily(
            "headway_running_sequences",
            "A generative model's sequences held on its workers",
            labels=["model"],
        )
        for model in snapshot.models:
            name, counts = model.status.label, model.counts
            requests.add_metric([name], counts.requests)
            for reason, count in counts.errors.items():
                errors.add_metric([name, reason], count)
            hits.add_metric([name], counts.cache_hits)
            queue.add_metric([name], model.scheduling.queued)
            ready.add_metric([name], 1.0 if model.status.state == "READY" else 0.0)
            _observe(latency, [name], counts.latency)
            _observe(batch, [name], counts.batch_size)
            late.add_metric([name], counts.late)
            _observe(waited, [name], counts.queue)
            _observe(computed, [name], counts.compute)
            measuring.add_metric([name], counts.measuring.runs)
            measuring_rows.add_metric([name], counts.measuring.rows)
            if model.status.config.streams or counts.parts:
                _observe(first_part, [name], counts.first_part)
                _observe(part_gap, [name], counts.part_gap)
                parts.add_metric([name], counts.parts)
                rate.add_metric([name], counts.parts_per_second)
                streams.add_metric([name], counts.streams)
            if model.status.config.generative is not None:
                running.add_metric([name], model.scheduling.running)
        yield from (requests, errors, hits, queue, ready, latency, batch, late, waited, computed)
        yield from (measuring, measuring_rows)
        yield from (first_part, part_gap, parts, rate, streams, running)
        yield from _scheduler_events(snapshot)
        used = GaugeMetricFamily(
            "headway_worker_memory_bytes", "Model memory held", labels=["worker"]
        )
        resident = GaugeMetricFamily("headway_worker_models", "Models resident", labels=["worker"])
        for worker in snapshot.workers:
            used.add_metric([str(worker.worker)], worker.used_mb * 2**20)
            resident.add_metric([str(worker.worker)], worker.resident)
        yield used
        yield resident
        pids = snapshot.pids
        yield GaugeMetricFamily("headway_workers", "Live worker processes", value=len(pids))
        nodes = {w.worker: w.node for w in snapshot.workers if w.node is not None}
        if nodes:  # on a cluster (the Ray engine): which node hosts what
            info = GaugeMetricFamily(
                "headway_worker_node",
                "1 for each worker, labelled with the cluster node hosting it and its pid there",
                labels=["worker", "node", "pid"],
            )
            for number, node in sorted(nodes.items()):
                info.add_metric([str(number), node, str(pids.get(number, ""))], 1.0)
            yield info
            hosted = GaugeMetricFamily(
                "headway_model_replicas", "Loaded replicas per node", labels=["model", "node"]
            )
            for model in snapshot.models:
                placed = model.status.workers
                for node in {nodes[w] for w in placed if w in nodes}:
                    count = sum(1 for w in placed if nodes.get(w) == node)
                    hosted.add_metric([model.status.label, node], float(count))
            yield hosted


#: The scheduler's events, each counted per model (and by reason where there is one).
_EVENTS = (
    ("loads", "Models loaded on demand", False),
    ("probe_loads", "Of the loads, those made to measure after a refused cold start", False),
    ("evictions", "Models evicted to fit the memory budget", False),
    ("cold_starts", "Requests that arrived for a model no worker held", False),
    (REFUSED_BY_WORKER, "Actions workers refused because they arrived after their window", False),
    (DROPPED, "Queued requests rejected once their deadline could not be met", True),
    (REJECTED_AT_ADMISSION, "Requests rejected on arrival: their deadline was unmeetable", True),
    (REFUSED_UNREAD, "Requests refused under overload before they were decoded", True),
)


def _scheduler_events(snapshot: ControllerSnapshot) -> Iterator[Metric]:
    families = {
        event: CounterMetricFamily(
            f"headway_{event}", help_text, labels=["model", "reason"] if by_reason else ["model"]
        )
        for event, help_text, by_reason in _EVENTS
    }
    reasons = {event: by_reason for event, _, by_reason in _EVENTS}
    labels = snapshot.labels
    for (key, event, reason), count in sorted(snapshot.scheduler.events.items()):
        model = labels.get(key, key)
        families[event].add_metric([model, reason] if reasons[event] else [model], count)
    yield from families.values()


class _Histogram(Protocol):
    @property
    def total(self) -> float: ...

    def cumulative(self) -> list[tuple[float, int]]: ...


def _observe(family: HistogramMetricFamily, labels: list[str], histogram: _Histogram) -> None:
    """One series of `family`: the histogram's cumulative buckets and their sum."""
    buckets = [
        ("+Inf" if b == float("inf") else repr(float(b)), float(n))
        for b, n in histogram.cumulative()
    ]
    family.add_metric(labels, buckets, histogram.total)


class FlowCollector:
    """Per-operator series of the flow applications, labelled `app` and `operator`."""

    def __init__(self, apps: AppRegistry) -> None:
        self.apps = apps

    def collect(self) -> Iterator[Metric]:
        labels = ["app", "operator"]
        families = {
            "calls": CounterMetricFamily("headway_flow_operator_calls", "Operator runs", labels=labels),
            "rows_in": CounterMetricFamily("headway_flow_operator_rows_in", "Rows into the operator", labels=labels),
            "rows_out": CounterMetricFamily("headway_flow_operator_rows_out", "Rows out of the operator", labels=labels),
            "errors": CounterMetricFamily("headway_flow_operator_errors", "Failed stage runs (on the stage's first operator)", labels=labels),
            "queued_s": CounterMetricFamily("headway_flow_operator_queued_seconds", "Time its stage waited before running (queue, transport)", labels=labels),
        }  # fmt: skip
        running = HistogramMetricFamily(
            "headway_flow_operator_seconds", "Time the operator ran, per call", labels=labels
        )
        for name, app in sorted(self.apps.apps.items()):
            if not isinstance(app, FlowApplication):
                continue
            for op in app.stats.operators.values():
                for field, family in families.items():
                    family.add_metric([name, op.operator], getattr(op, field))
                _observe(running, [name, op.operator], op.histogram)
        yield from families.values()
        yield running


class TunerCollector:
    """The live tuner's replicas per stage and its changes (`headway serve --tune`)."""

    def __init__(self, tuner: LiveTuner) -> None:
        self.tuner = tuner

    def collect(self) -> Iterator[Metric]:
        figures = self.tuner.statistics()
        replicas = GaugeMetricFamily(
            "headway_tuner_replicas",
            "Replicas the tuner asks for, per pipeline stage",
            labels=["stage", "model"],
        )
        for stage, count in figures["replicas"].items():
            replicas.add_metric([stage, figures["models"][stage]], count)
        changes = CounterMetricFamily(
            "headway_tuner_changes",
            "Replica changes the tuner made, per stage and direction",
            labels=["stage", "direction"],
        )
        for label, count in figures["changes"].items():
            stage, direction = label.rsplit(":", 1)
            changes.add_metric([stage, direction], count)
        yield replicas
        yield changes


def render(
    controller: Controller, apps: AppRegistry | None = None, tuner: LiveTuner | None = None
) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)  # process_*: CPU, memory, open files of the frontend
    registry.register(ControllerCollector(controller))
    if apps is not None:
        registry.register(FlowCollector(apps))
    if tuner is not None:
        registry.register(TunerCollector(tuner))
    return bytes(generate_latest(registry))
