"""Sizing a generative stage: the fewest replicas at which a trace of streamed requests meets
both of its targets, time to first part and time per part, for the share asked (DistServe's
goodput at 90% attainment by default).

Each candidate runs the trace through the simulated server (`headway.sim`): the controller's
own admission and iteration-level batching over simulated workers that replay the model's
measured step profile, so a replica count is judged by what the scheduler would do with it,
refusals included (a refused request is a miss).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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
