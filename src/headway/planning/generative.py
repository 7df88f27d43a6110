"""Sizing a generative stage: the fewest replicas at which a trace of streamed requests meets
both of its targets, time to first part and time per part, for the share asked (DistServe's
goodput at 90% attainment by default).

Each candidate runs the trace through the simulated server (`headway.sim`): the controller's
own admission and iteration-level batching over simulated workers that replay the model's
measured step profile, so a replica count is judged by what the scheduler would do with it,
refusals included (a refused request is a miss).

`headway plan --generative STAGE.yaml --trace ARRIVALS` reads a stage from YAML:

    steps_ms: {1: 2, 8: 6, 16: 10}       # step time by sequences in the step, measured
    first_steps_ms: {1: 5, 8: 20}         # optional: a step starting that many sequences
    max_sequences: 16                     # model.yaml's generative.max_sequences
    parts: {16: 0.8, 96: 0.2}             # parts per request: a number, or lengths and shares
    ttft_ms: 500
    tpot_ms: 50
    attainment: 0.9                       # optional (0.9)
    most: 16                              # optional: the most replicas tried (16)

`headway profile` measures a generative model's steps on a worker and writes this file
(`headway.planning.steps`): its step times, its first steps' where they differ, and the
model.yaml's `max_sequences`, `max_parts` and targets, to edit to the traffic served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headway.errors import ConfigError
from headway.repository import Generation
from headway.sim import ModelProfile, ServerSimulation

#: The model's name in the simulation.
STAGE = "generative"


@dataclass(frozen=True)
class StageSize:
    """The replicas found (None: none up to the most tried meets the targets), and the share
    of requests that met both targets at each count tried."""

    replicas: int | None
    attained: dict[int, float]


def size_generative_stage(
    profile: ModelProfile,
    times: np.ndarray,
    parts: Sequence[int],
    *,
    ttft: float,
    tpot: float,
    attainment: float = 0.9,
    most: int = 16,
    rpc_seconds: float = 0.0002,
) -> StageSize:
    """The fewest replicas of the generative model `profile` (its `generative` set; its
    durations per number of sequences in a step) at which at least `attainment` of the
    requests arriving at `times` (seconds), each asking for its `parts`, meet `ttft` and
    `tpot` (seconds)."""
    if profile.generative is None:
        raise ValueError("the profile is not of a generative model (its generative is None)")
    attained: dict[int, float] = {}
    for replicas in range(1, most + 1):
        with ServerSimulation(
            {STAGE: profile}, workers=replicas, replicas={STAGE: replicas}, rpc_seconds=rpc_seconds
        ) as sim:
            result = sim.run_streams(times, [STAGE] * len(times), parts, ttft=ttft, tpot=tpot)
        share = float(result.attained(ttft, tpot).mean()) if len(times) else 1.0
        attained[replicas] = share
        if share >= attainment:
            return StageSize(replicas, attained)
    return StageSize(None, attained)


@dataclass(frozen=True)
class GenerativeStage:
    """A generative stage to size: its model's profile, the parts its requests ask for (each
    length with its share), its two targets (seconds) and the share that must meet them."""

    profile: ModelProfile
    lengths: dict[int, float]
    ttft: float
    tpot: float
    attainment: float = 0.9
    most: int = 16

    def parts(self, requests: int, seed: int = 0) -> list[int]:
        """Each of `requests` requests' parts, drawn from the lengths by their shares."""
        lengths = sorted(self.lengths)
        shares = np.array([self.lengths[n] for n in lengths], dtype=float)
        rng = np.random.default_rng(seed)
        return [int(n) for n in rng.choice(lengths, size=requests, p=shares / shares.sum())]


GENERATIVE_KEYS = (
    "steps_ms",
    "max_sequences",
    "parts",
    "ttft_ms",
    "tpot_ms",
    "attainment",
    "most",
    "first_steps_ms",
)


def parse_generative_stage(raw: Any, where: str) -> GenerativeStage:
    """A stage from its YAML (see the module docstring), or a ConfigError naming the key."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping with {', '.join(GENERATIVE_KEYS[:5])}")
    unknown = sorted(set(raw) - set(GENERATIVE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; known: {list(GENERATIVE_KEYS)}")

    def number(key: str, value: Any, *, positive: bool = True) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(f"{where}: {key} must be a number >= 0, got {value!r}")
        if positive and value == 0:
            raise ConfigError(f"{where}: {key} must be above 0")
        return float(value)

    for key in ("steps_ms", "parts", "ttft_ms", "tpot_ms"):
        if key not in raw:
            raise ConfigError(f"{where}: {key} is required")

    def steps(key: str) -> dict[int, float]:
        table = raw[key]
        if not isinstance(table, Mapping) or not table:
            raise ConfigError(f"{where}: {key} must map sequences per step to milliseconds")
        return {int(number(f"{key} key", n)): number(f"{key}[{n}]", ms) / 1e3
                for n, ms in table.items()}  # fmt: skip

    durations = steps("steps_ms")
    first_steps = steps("first_steps_ms") if "first_steps_ms" in raw else None
    parts = raw["parts"]
    if isinstance(parts, Mapping):
        lengths = {int(number("parts key", n)): number(f"parts[{n}]", s) for n, s in parts.items()}
    else:
        lengths = {int(number("parts", parts)): 1.0}
    if not lengths:
        raise ConfigError(f"{where}: parts must name at least one length")
    max_sequences = int(number("max_sequences", raw.get("max_sequences", max(durations))))
    attainment = number("attainment", raw.get("attainment", 0.9))
    if attainment > 1:
        raise ConfigError(f"{where}: attainment is a share, at most 1, got {attainment!r}")
    profile = ModelProfile(
        durations,
        load_seconds=0.05,
        size_mb=10,
        generative=Generation(max_sequences, max(lengths)),
        first_steps=first_steps,
    )
    return GenerativeStage(
        profile,
        lengths,
        number("ttft_ms", raw["ttft_ms"]) / 1e3,
        number("tpot_ms", raw["tpot_ms"]) / 1e3,
        attainment,
        int(number("most", raw.get("most", 16))),
    )
