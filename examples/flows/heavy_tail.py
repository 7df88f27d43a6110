"""A heavy-tailed operator: each call sleeps for a Pareto-distributed time (a 10 ms scale,
shape 1.2, at most 1 s: most calls are short, one in a hundred takes ~30x the median), drawn from a generator
seeded per process. Marked high-variance, it runs on two competing replicas when deployed;
the first answer wins. Its output does not depend on the draw, so every replica answers alike."""

from __future__ import annotations

import os
import random
import time

from headway.flows import Flow, Row

SEED = 14
SCALE_S = 0.01
SHAPE = 1.2
CAP_S = 1.0


def generator() -> random.Random:
    return random.Random(SEED * 100_003 + os.getpid())


def slow_square(rng: random.Random, row: Row) -> float:
    time.sleep(min(CAP_S, SCALE_S * rng.paretovariate(SHAPE)))
    return float(row["x"]) ** 2


def label(row: Row) -> str:
    return f"{row['slow_square']:.3f}"


def build() -> Flow:
    flow = Flow("heavy-tail", {"x": float})
    flow.map(slow_square, init=generator, high_variance=True).map(label, names=["answer"])
    return flow


flow = build()
