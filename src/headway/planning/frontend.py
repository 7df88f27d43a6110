"""The server's own time per query, outside the models: the frontend stage of an estimate.

A query over HTTP spends time the model profiles do not hold: reading and decoding the request,
the flow's operators that run in the server (a join, a filter, a cheap stage with no model),
encoding the answer, and the client's side of the loopback. The server spends it on its one
event loop, so under load queries queue for it as they queue for a model. The estimator models
it as a stage ahead of the pipeline's inputs: one replica, one query at a time, each taking
the measured time (InferLine profiled its frontend as a stage too).

`headway profile --frontend APP` measures it with the server idle: the app's queries are sent
one at a time, then many at a time, and the stage's time per query is the largest of three
figures (`frontend_time`): the client's wait less the models' time (the server's own
per-model latency on `/metrics`), the server process's CPU per query (which also counts the
event loop's share of each model call: dispatch, decoding the answer), and 1 / the queries a
second the server answered when saturated (the loop's rate when it shares the cores). It is
kept in the store next to the model profiles, as a row of the model `frontend_model(app)` on
the hardware `SERVER`, and `headway plan` adds the stage when the store has one for the app.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from headway.errors import ConfigError
from headway.planning.pipeline import (
    Catalogue,
    Configuration,
    Hardware,
    LatencyProfile,
    Pipeline,
    Profiles,
    Stage,
    StageConfig,
)
from headway.store.profiles import MeasuredProfile

#: The frontend stage's name in an estimate, and its "hardware" (it costs nothing extra: the
#: server runs whatever the plan buys).
STAGE = "(frontend)"
SERVER = "server"
#: The per-model latency the server reports (arrival at the controller to answer).
MODEL_LATENCY = "headway_request_latency_seconds"
#: The server process's CPU time (prometheus_client's process collector).
PROCESS_CPU = "process_cpu_seconds_total"


def frontend_model(app: str) -> str:
    """The name a frontend measurement is kept under in the store (no model is named so)."""
    return f"(frontend of {app})"


def frontend_row(app: str, seconds: float, samples: int) -> MeasuredProfile:
    return MeasuredProfile(
        frontend_model(app), SERVER, 1, mean=seconds, throughput=1 / seconds, samples=samples
    )


def frontend_seconds(rows: Iterable[MeasuredProfile], app: str) -> float | None:
    """The kept frontend time of `app`, or None if it was never measured."""
    name = frontend_model(app)
    found = [r.mean for r in rows if r.model == name and r.hardware == SERVER]
    return found[-1] if found else None


def model_seconds(metrics_text: str) -> float:
    """Seconds the server's models took in total so far (summed over models), from `/metrics`."""
    total = 0.0
    for family in text_string_to_metric_families(metrics_text):
        if family.name != MODEL_LATENCY:
            continue
        total += sum(s.value for s in family.samples if s.name == f"{MODEL_LATENCY}_sum")
    return total


def process_cpu(metrics_text: str) -> float | None:
    """The server process's CPU seconds so far (`process_cpu_seconds_total` on `/metrics`:
    the frontend's own, its workers are other processes), or None where it is not reported."""
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == PROCESS_CPU:
                return float(sample.value)
    return None


def busy_per_query(queries: int, before: str, after: str) -> float:
    """The server process's CPU seconds per query between two scrapes of `/metrics` (0 where
    the process's CPU is not reported)."""
    start, end = process_cpu(before), process_cpu(after)
    if start is None or end is None or queries <= 0:
        return 0.0
    return max(0.0, end - start) / queries


def frontend_time(
    latencies: list[float], before: str, after: str, saturated_qps: float | None = None
) -> float:
    """The frontend stage's time per query: the largest of the client's wait outside the
    models (`outside_models`), the server process's CPU per query (`busy_per_query`), both of
    queries sent one at a time, and 1 / `saturated_qps`, the queries a second the server
    answered with many in flight.

    The wait outside the models leaves out the event loop's CPU for each model call
    (dispatching it, decoding its answer: the models' latency holds it), so the loop saturates
    well before 1 / that wait; its CPU per query is the loop's time where it has a core to
    itself; and where it shares the cores with its workers and the client (and whatever else
    runs), only the saturated rate shows how many queries a second it gets through."""
    times = [outside_models(latencies, before, after),
             busy_per_query(len(latencies), before, after)]  # fmt: skip
    if saturated_qps:
        times.append(1 / saturated_qps)
    return max(times)


def outside_models(latencies: list[float], before: str, after: str) -> float:
    """Seconds per query outside the models: the client's mean wait less the models' time per
    query, the models' time being the change in `/metrics` (`before` and `after` the queries,
    sent one at a time so that nothing else ran). A flow that calls models in parallel makes
    this an under-estimate (their times add up, their waits do not)."""
    if not latencies:
        raise ConfigError("no query was answered: nothing to measure the frontend by")
    spent = (model_seconds(after) - model_seconds(before)) / len(latencies)
    return max(0.0, sum(latencies) / len(latencies) - spent)


def with_frontend(
    pipeline: Pipeline, config: Configuration, profiles: Profiles, seconds: float
) -> tuple[Pipeline, Configuration, Profiles]:
    """`pipeline` behind a frontend stage taking `seconds` per query, one query at a time:
    every input stage becomes its child (the frontend passes every query on)."""
    if STAGE in pipeline.names:
        raise ConfigError(f"pipeline {pipeline.name!r} has a stage named {STAGE!r}")
    stages = [Stage(STAGE, STAGE)] + [
        dataclasses.replace(s, parents=s.parents or (STAGE,)) for s in pipeline.stages
    ]
    configs = {STAGE: StageConfig(SERVER, 1, 1), **dict(config.stages)}
    timed = {**profiles, STAGE: {SERVER: LatencyProfile({1: seconds})}}
    return Pipeline(pipeline.name, tuple(stages)), Configuration(configs), timed


def with_server(catalogue: Catalogue) -> Catalogue:
    """`catalogue` with the frontend's kind, at no cost."""
    kinds: Mapping[str, Hardware] = {**catalogue.kinds, SERVER: Hardware(SERVER, 0.0)}
    return Catalogue(kinds)
