"""Profiling a generative model's steps on a real worker, into the stage file `headway plan
--generative` reads (`headway.planning.generative`).

A generative model is not measured per batch but per step: each call advances every running
sequence by one part, so its cost is a function of how many sequences run (1 .. its
`max_sequences`). The first step of a sequence also reads its input (its prefill), which may
cost more than a step that only extends it; both are measured, apart.

The worker is driven as the controller drives it, with STEP actions, but without the
controller's admission between them, so that each step holds exactly the sequences asked for:
a sample at size n starts n sequences of zero inputs (as the controller's warm-up does) in one
step (a first step of n), runs them `DECODE_STEPS` more steps (following steps of n), and stops
them. Samples follow `profiler.measuring_order`: warm first, then sizes in shuffled rounds,
whose spread is reported with each figure. A step's time is dispatch to reply, as the
single-answer profiler measures a batch.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headway.control.actions import LOAD, STEP
from headway.control.engine import Action, Reply, Tensors
from headway.datatypes import numpy_dtype
from headway.errors import ConfigError
from headway.planning.pipeline import Hardware
from headway.planning.profiler import (
    ROUNDS,
    THREAD_VARIABLES,
    WARMUP,
    Progress,
    measuring_order,
    summarise,
)
from headway.repository import ModelConfig, TensorSpec
from headway.runtime.engines.local import LocalEngine
from headway.runtime.worker import FRAMEWORKS_ENV
from headway.store.profiles import MeasuredProfile

#: Following steps measured per sample, after its first step.
DECODE_STEPS = 4
#: The least relative difference between a first step and a following one of the same size
#: that is written apart (below it, or within the rounds' spread, they are one figure).
FIRST_STEP_MARGIN = 0.05
#: Seconds a worker is given to start, load the model, or answer one step.
PATIENCE_S = 120.0


def sequence_counts(max_sequences: int) -> list[int]:
    """1, 2, 4 ... up to `max_sequences` (itself the last), the sizes a step is measured at."""
    sizes = [1]
    while sizes[-1] < max_sequences:
        sizes.append(min(sizes[-1] * 2, max_sequences))
    return sizes


@dataclass(frozen=True)
class MeasuredSteps:
    """A generative model's steps as measured: per number of sequences, the following steps
    (`steps`) and the first steps, that start them (`first`); `batch_size` is the number."""

    model: ModelConfig
    steps: list[MeasuredProfile]
    first: list[MeasuredProfile]


def first_step_differs(step: MeasuredProfile, first: MeasuredProfile) -> bool:
    """Whether a first step of a size took other than a following one: further apart than
    `FIRST_STEP_MARGIN` and than either figure's spread over the rounds."""
    noise = max(FIRST_STEP_MARGIN, step.spread or 0.0, first.spread or 0.0)
    return abs(first.mean - step.mean) > noise * step.mean


def stage_document(measured: MeasuredSteps) -> dict[str, Any]:
    """The stage file of the measured model (`headway.planning.generative`'s format): its
    step times, its first steps' where any size's differ (`first_step_differs`), its
    `max_sequences`, each request asking for its `max_parts`, and its targets from model.yaml
    (the first part's: `ttft_ms`, else `slo_ms`; a part's: `tpot_ms`, else the first's).
    The parts and targets are the model's defaults; edit them to the traffic to be served."""
    config = measured.model
    generation = config.generative
    if generation is None:
        raise ConfigError(f"model {config.name!r} is not generative: it has no step profile")
    if not measured.steps:
        raise ConfigError(f"model {config.name!r}: no step was measured")
    ttft = config.ttft_ms if config.ttft_ms is not None else config.slo_ms
    tpot = config.tpot_ms if config.tpot_ms is not None else ttft
    document: dict[str, Any] = {
        "steps_ms": {r.batch_size: _ms(r.mean) for r in measured.steps},
    }
    following = {r.batch_size: r for r in measured.steps}
    if any(
        first_step_differs(following[f.batch_size], f)
        for f in measured.first
        if f.batch_size in following
    ):
        document["first_steps_ms"] = {r.batch_size: _ms(r.mean) for r in measured.first}
    document.update(
        max_sequences=generation.max_sequences,
        parts=generation.max_parts,
        ttft_ms=float(ttft),
        tpot_ms=float(tpot),
    )
    return document


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 4)


def zero_inputs(specs: Sequence[TensorSpec], rows: int) -> Tensors:
    """`rows` rows of zeros (empty texts for BYTES) per input: the warm-up's inputs."""
    return {
        s.name: np.full(
            (rows, *(max(d, 1) for d in s.shape[1:])),
            b"" if s.datatype == "BYTES" else 0,
            object if s.datatype == "BYTES" else numpy_dtype(s.datatype),
        )
        for s in specs
    }


class SteppedWorker:
    """One worker process, driven action by action: each `call` sends one action and waits
    for its reply."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.engine = LocalEngine(1, env=dict(env))
        self.replies: asyncio.Queue[Reply] = asyncio.Queue()
        self.ids = itertools.count(1)

    async def __aenter__(self) -> SteppedWorker:
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_ready(worker: int, pid: int) -> None:
            if not ready.done():
                ready.set_result(pid)

        self.engine.on_ready = on_ready
        self.engine.on_message = lambda worker, reply, tensors: self.replies.put_nowait(reply)
        self.engine.on_exit = lambda worker, code: self.replies.put_nowait(
            {"id": None, "ok": False, "error": f"the worker exited (code {code})"}
        )
        await self.engine.start()
        await asyncio.wait_for(ready, PATIENCE_S)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.engine.stop()

    async def call(self, action: Action, tensors: Tensors | None = None) -> tuple[Reply, float]:
        """The reply to `action`, and the seconds from sending it to hearing it."""
        action["id"] = next(self.ids)
        started = time.perf_counter()
        if not self.engine.send(0, action, tensors or {}):
            raise ConfigError("the profiling worker is gone")
        reply = await asyncio.wait_for(self.replies.get(), PATIENCE_S)
        took = time.perf_counter() - started
        if not reply.get("ok"):
            raise ConfigError(
                f"model {action.get('model')!r}: its {action['op']} failed while profiling its "
                f"steps: {reply.get('error')}"
            )
        return reply, took


async def profile_steps(
    config: ModelConfig,
    kind: Hardware,
    *,
    sizes: Sequence[int] | None = None,
    iterations: int = 50,
    warmup: int = WARMUP,
    rounds: int = ROUNDS,
    seed: int = 0,
    decode: int = DECODE_STEPS,
    progress: Progress | None = None,
) -> MeasuredSteps:
    """Measure generative model `config`'s steps on one worker of hardware `kind`: at each
    size (default `sequence_counts` of its `max_sequences`) `iterations` samples (a first
    step and `decode` following ones each), in `measuring_order`."""
    generation = config.generative
    if generation is None:
        raise ConfigError(f"model {config.name!r} is not generative: profile it per batch size")
    if kind.gpu is not None:
        raise ConfigError(f"hardware {kind.name!r} has a GPU: import its profiles from a file")
    sizes = list(sizes or sequence_counts(generation.max_sequences))
    too_many = [n for n in sizes if n < 1 or n > generation.max_sequences]
    if too_many:
        raise ConfigError(
            f"model {config.name!r}: sizes {too_many} are outside 1 .. its max_sequences "
            f"({generation.max_sequences})"
        )
    env = {variable: str(kind.threads) for variable in THREAD_VARIABLES}
    env[FRAMEWORKS_ENV] = config.framework
    following: dict[int, dict[int, list[float]]] = {n: {} for n in sizes}
    first: dict[int, dict[int, list[float]]] = {n: {} for n in sizes}
    async with SteppedWorker(env) as worker:
        load: Action = {"op": LOAD, "model": config.key, "config": config.to_wire()}
        loaded, _ = await worker.call(load)
        specs = config.inputs or tuple(
            TensorSpec.parse(raw, f"model {config.name!r}") for raw in loaded.get("inputs", [])
        )
        if not specs:
            raise ConfigError(f"model {config.name!r} declares no inputs to start sequences")
        numbers = itertools.count(1)
        for call in measuring_order(sizes, iterations, warmup=warmup, rounds=rounds, seed=seed):
            took_first, took = await _sample(worker, config, specs, call.batch, decode, numbers)
            if call.round is not None:
                first[call.batch].setdefault(call.round, []).append(took_first)
                following[call.batch].setdefault(call.round, []).extend(took)
    steps, firsts = [], []
    for n in sizes:
        if not any(following[n].values()):
            raise ConfigError(
                f"model {config.name!r} ended its sequences after their first step: no "
                f"following step of {n} sequences was measured"
            )
        steps.append(summarise(config.name, kind.name, n, list(following[n].values())))
        firsts.append(summarise(config.name, kind.name, n, list(first[n].values())))
        if progress is not None:
            progress(steps[-1])
    return MeasuredSteps(config, steps, firsts)


async def _sample(
    worker: SteppedWorker,
    config: ModelConfig,
    specs: Sequence[TensorSpec],
    size: int,
    decode: int,
    numbers: itertools.count[int],
) -> tuple[float, list[float]]:
    """One sample at `size`: the first step that starts `size` sequences, and each following
    step taken while all of them still ran."""
    started = [next(numbers) for _ in range(size)]
    action: Action = {
        "op": STEP,
        "model": config.key,
        "start": [[number, {}, decode + 1] for number in started],
        "run": started,
    }
    reply, took_first = await worker.call(action, zero_inputs(specs, size))
    if reply.get("failed"):
        raise ConfigError(
            f"model {config.name!r}: sequences failed to start while profiling its steps: "
            f"{reply['failed']}"
        )
    held = [n for n in started if n not in set(reply.get("finished") or ())]
    took: list[float] = []
    while len(held) == size and len(took) < decode:
        reply, seconds = await worker.call({"op": STEP, "model": config.key, "run": held})
        took.append(seconds)
        held = [n for n in held if n not in set(reply.get("finished") or ())]
    if held:
        await worker.call({"op": STEP, "model": config.key, "stop": held, "run": []})
    return took_first, took
