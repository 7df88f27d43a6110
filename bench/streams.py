"""Iteration-level against request-level batching of the demo's text generator, at the same
offered load: tokens/s, time to first token, and goodput as DistServe defines it.

One controller (`headway.control.Controller`, the scheduler every transport reaches through its
one door) and one worker process serve the demo's `tiny-gpt` (`headway.textgen`) twice, the
same weights and `max_sequences` under two model names:

- ``iteration``: `generative: {batching: iteration}` (Orca): each step re-forms the batch, a
  finished sequence leaves at once, a new one joins the next step;
- ``request``: `generative: {batching: request}`: a batch runs until its longest sequence
  ends before any new sequence joins (how a server without iteration-level scheduling batches
  generation), with the same early refusals;
- ``request-queued``: the same model, its requests sent without targets, so that none is
  refused and each waits its turn (a plain request-level batcher with a queue); judged by the
  same targets.

Both see the same open-loop traffic: Poisson arrivals at each rate of ``--rates``, each
request a prompt and a length drawn from a long-tailed mix (most texts short, some long:
``--short``, ``--long``, ``--long-share``), written past sentence ends (`ignore_end`) so each
text has exactly its length. Each request carries the same two targets (``--ttft-ms``,
``--tpot-ms``); the controller refuses at once what it cannot serve in time, and a refused
request counts as a miss. Rates and modes are interleaved (each rate: both modes, in turn),
the arrivals and lengths of a rate the same for both.

Per request: time to first token (TTFT) and time per output token after the first (TPOT, the
mean gap: (last - first) / (tokens - 1)), as DistServe measures them. A request *attains*
when it was admitted, ended, and met both targets. **Goodput** is the highest rate swept at
which at least 90% of the offered requests attain (DistServe's goodput at 90% attainment).

    PYTHONPATH=src python bench/streams.py [--rates 20,30,40,50,60,70] [--rounds 2]

Then the same comparison through the simulated server (`headway.sim`: the same controller over
simulated workers, in virtual time) with the step profile the live runs measured, at
``--sim-rates``: the scheduling alone, without this machine's noise.

Needs torch (the text generator); trains it on first use (seconds), keeping its weights in
the system's temporary folder for later runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import uvloop
import yaml

from headway import textgen
from headway.cli.serve import GC_YOUNG_THRESHOLD
from headway.control.controller import Controller
from headway.control.request import InferenceRequest, Prediction, Tensors
from headway.errors import HeadwayError
from headway.repository import Repository
from headway.runtime.engines.local import LocalEngine

#: Each mode: the model it sends to, and whether its requests carry the targets (the
#: controller refuses at once what cannot meet them) or none (queued until served).
MODES = {
    "iteration": ("iteration", True),
    "request": ("request", True),
    "request-queued": ("request", False),
}
#: What a request that carries no targets waits at most for its first part (seconds).
PATIENT_S = 600.0
PROMPTS = ("Return the", "Create a", "The socket", "Read the", "This module", "If the")
CACHE = Path(tempfile.gettempdir()) / "headway-textgen-cache"


@dataclass
class Outcome:
    """One request: when it was sent, its length, and what came of it (seconds)."""

    sent: float
    length: int
    refused: str = ""
    failed: str = ""
    first: float | None = None
    last: float | None = None
    tokens: int = 0
    ended: bool = False

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.sent

    @property
    def tpot(self) -> float | None:
        if self.first is None or self.last is None or self.tokens < 2:
            return None
        return (self.last - self.first) / (self.tokens - 1)

    def attains(self, ttft: float, tpot: float) -> bool:
        first, gap = self.ttft, self.tpot
        return (
            self.ended
            and not self.failed
            and first is not None
            and first <= ttft
            and (gap is None or gap <= tpot)
        )


class Timing:
    """A receiver that stamps each part of one request's stream."""

    def __init__(self, outcome: Outcome, done: asyncio.Event, pending: list[int]) -> None:
        self.outcome = outcome
        self._done = done
        self._pending = pending

    def part(self, outputs: Tensors) -> None:
        now = time.perf_counter()
        if self.outcome.first is None:
            self.outcome.first = now
        self.outcome.last = now
        self.outcome.tokens += 1

    def done(self, prediction: Prediction) -> None:
        self.outcome.ended = True
        self._settle()

    def fail(self, error: Exception) -> None:
        self.outcome.failed = f"{type(error).__name__}: {error}"
        self._settle()

    def _settle(self) -> None:
        self._pending[0] -= 1
        if self._pending[0] == 0:
            self._done.set()


@dataclass
class Run:
    """One mode at one rate: its requests' outcomes and the seconds from the first arrival to
    the last part."""

    mode: str
    rate: float
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self, ttft: float, tpot: float) -> dict[str, Any]:
        admitted = [o for o in self.outcomes if not o.refused]
        firsts = [o.ttft for o in admitted if o.ttft is not None]
        gaps = [o.tpot for o in admitted if o.tpot is not None]
        tokens = sum(o.tokens for o in self.outcomes)
        refusals: dict[str, int] = {}
        for o in self.outcomes:
            if o.refused:
                refusals[o.refused] = refusals.get(o.refused, 0) + 1
        return {
            "mode": self.mode,
            "rate": self.rate,
            "offered": len(self.outcomes),
            "admitted": len(admitted),
            "failed": sum(1 for o in admitted if o.failed),
            "refusals": refusals,
            "tokens_per_s": tokens / self.seconds if self.seconds else 0.0,
            "ttft_p50_ms": percentile(firsts, 50),
            "ttft_p99_ms": percentile(firsts, 99),
            "tpot_p50_ms": percentile(gaps, 50),
            "tpot_p99_ms": percentile(gaps, 99),
            "attained": sum(o.attains(ttft, tpot) for o in self.outcomes) / len(self.outcomes),
            "admitted_in_ttft": (
                sum(1 for f in firsts if f <= ttft) / len(admitted) if admitted else None
            ),
            "tokens_in_targets_per_s": (
                sum(o.tokens for o in self.outcomes if o.attains(ttft, tpot)) / self.seconds
                if self.seconds
                else 0.0
            ),
        }


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) * 1e3 if values else None


def repository(root: Path, max_sequences: int, max_parts: int) -> Repository:
    """The text generator twice under `root`: `tiny-gpt-iteration`, `tiny-gpt-request`."""
    for mode in ("iteration", "request"):
        textgen.build(
            root,
            name=f"tiny-gpt-{mode}",
            cache=CACHE,
            generation={
                "max_sequences": max_sequences,
                "max_parts": max_parts,
                "batching": mode,
            },
            progress=print,
        )
        config = yaml.safe_load((root / f"tiny-gpt-{mode}" / "model.yaml").read_text())
        config["max_queue"] = 4096
        (root / f"tiny-gpt-{mode}" / "model.yaml").write_text(yaml.safe_dump(config))
    return Repository.scan(root)


def arrivals(rate: float, duration: float, args: argparse.Namespace, seed: int) -> list[Any]:
    """(offset seconds, prompt, length) of each request: Poisson at `rate`, the same for a
    given seed."""
    rng = random.Random(seed)
    out = []
    at = rng.expovariate(rate)
    while at < duration:
        long = rng.random() < args.long_share
        length = args.long if long else args.short
        out.append((at, rng.choice(PROMPTS), length))
        at += rng.expovariate(rate)
    return out


async def drive(
    controller: Controller, mode: str, rate: float, plan: list[Any], args: argparse.Namespace
) -> Run:
    batching, targets = MODES[mode]
    run = Run(mode, rate)
    done = asyncio.Event()
    pending = [len(plan)]
    start = time.perf_counter()
    for i, (offset, prompt, length) in enumerate(plan):
        delay = start + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        outcome = Outcome(sent=time.perf_counter(), length=length)
        run.outcomes.append(outcome)
        request = InferenceRequest(
            f"tiny-gpt-{batching}",
            inputs={"text_input": np.array([[prompt.encode()]], dtype=object)},
            stream=True,
            ttft=args.ttft_ms / 1e3 if targets else PATIENT_S,
            tpot=args.tpot_ms / 1e3 if targets else None,
            parameters={"max_tokens": length, "ignore_end": True, "seed": i},
        )
        try:
            controller.submit(request, Timing(outcome, done, pending))
        except HeadwayError as exc:
            outcome.refused = exc.reason
            pending[0] -= 1
    if pending[0] > 0:
        await asyncio.wait_for(done.wait(), PATIENT_S)
    ends = [o.last for o in run.outcomes if o.last is not None]
    run.seconds = (max(ends) if ends else time.perf_counter()) - start
    return run


async def bench(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[int, float]]:
    """The live runs (each rate, each mode, `--rounds` times), and the step profile the
    controller measured (seconds per step, by sequences in it)."""
    root = Path(tempfile.mkdtemp(prefix="headway-streams-bench-"))
    controller = Controller(
        repository(root, args.max_sequences, args.long), LocalEngine(1), ready_timeout=120
    )
    await controller.start()
    results = []
    try:
        for batching in ("iteration", "request"):
            while controller.warming(f"tiny-gpt-{batching}"):
                await asyncio.sleep(0.05)
        for round_ in range(args.rounds):
            for rate in args.rates:
                plan = arrivals(rate, args.duration, args, seed=int(rate * 1000) + round_)
                for mode in args.modes:
                    await asyncio.sleep(0.5)  # let the last run's tail settle
                    key = f"tiny-gpt-{MODES[mode][0]}"
                    before = controller.model_statistics(key).counts.batch_size
                    steps, held = before.count, before.total
                    run = await drive(controller, mode, rate, plan, args)
                    summary = run.summary(args.ttft_ms / 1e3, args.tpot_ms / 1e3)
                    summary["round"] = round_
                    # a run past capacity that delivers less: fewer steps (the machine) or
                    # emptier ones (admission left slots free)?
                    after = controller.model_statistics(key).counts.batch_size
                    steps, held = after.count - steps, after.total - held
                    summary["steps_per_s"] = steps / run.seconds if run.seconds else 0.0
                    summary["sequences_per_step"] = held / steps if steps else 0.0
                    results.append(summary)
                    print(line(summary), flush=True)
        profile = step_profile(controller, args)
    finally:
        await controller.stop()
    return results, profile


def step_profile(controller: Controller, args: argparse.Namespace) -> dict[int, float]:
    """Seconds per step by the sequences in it, as the live iteration-level runs' steps took
    them: the worker's run and the round trip (mean over the steps of each size)."""
    counts = controller.model_statistics("tiny-gpt-iteration").counts
    return {
        n: (t.input_s + t.infer_s + t.output_s) / t.count
        for n, t in sorted(counts.batches.items())
        if t.count >= 5
    }


def simulate(args: argparse.Namespace, profile: dict[int, float]) -> list[dict[str, Any]]:
    """Each mode at each of `--sim-rates` through the simulated server (the same controller
    over simulated workers, in virtual time) with the measured step profile: the comparison
    without the machine's noise."""
    from headway.repository import Generation
    from headway.sim import ModelProfile, ServerSimulation

    ttft, tpot = args.ttft_ms / 1e3, args.tpot_ms / 1e3
    out = []
    for rate in args.sim_rates:
        plan = arrivals(rate, args.sim_duration, args, seed=int(rate * 1000))
        times = np.array([at for at, _, _ in plan])
        parts = [length for _, _, length in plan]
        for mode, (batching, targets) in MODES.items():
            model = ModelProfile(
                profile,
                load_seconds=0.05,
                size_mb=10,
                generative=Generation(args.max_sequences, args.long, batching),
            )
            with ServerSimulation({"gen": model}, workers=1) as sim:
                result = sim.run_streams(
                    times,
                    ["gen"] * len(times),
                    parts,
                    ttft=ttft if targets else PATIENT_S,
                    tpot=tpot if targets else None,
                    drain=PATIENT_S,
                )
            summary = result.summary(ttft, tpot)
            summary.update(mode=mode, rate=rate)
            out.append(summary)
            print(
                f"simulated {mode:14} {rate:6.1f} req/s: attained {summary['attainment']:.0%}, "
                f"{summary['parts_per_second']:.0f} tok/s, TTFT p99 "
                f"{summary['ttft_p99_ms'] or 0:.0f} ms, refusals {summary['reasons']}",
                flush=True,
            )
    return out


def line(s: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    return (
        f"{s['mode']:14} {s['rate']:6.1f} req/s: admitted {s['admitted']}/{s['offered']}, "
        f"{s['tokens_per_s']:7.0f} tok/s, TTFT p50 {ms(s['ttft_p50_ms'])} p99 "
        f"{ms(s['ttft_p99_ms'])} ms, TPOT p50 {ms(s['tpot_p50_ms'])} p99 "
        f"{ms(s['tpot_p99_ms'])} ms, attained {s['attained']:.0%}, refusals {s['refusals']}, "
        f"{s['steps_per_s']:.0f} steps/s of {s['sequences_per_step']:.1f} sequences"
    )


def goodput(results: list[dict[str, Any]], mode: str, key: str = "attained") -> float:
    """The highest rate swept at which at least 90% of offered requests attained (the median
    over rounds)."""
    by_rate: dict[float, list[float]] = {}
    for s in results:
        if s["mode"] == mode:
            by_rate.setdefault(s["rate"], []).append(s[key])
    return max((r for r, a in by_rate.items() if float(np.median(a)) >= 0.9), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="20,30,40,50,60,70", help="requests/s, comma-separated")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of arrivals")
    parser.add_argument("--rounds", type=int, default=1, help="live runs of each rate and mode")
    parser.add_argument("--sim-rates", default="10,20,30,40,50,60,70,80,90,100")
    parser.add_argument("--sim-duration", type=float, default=30.0)
    parser.add_argument("--max-sequences", type=int, default=16)
    parser.add_argument("--short", type=int, default=16, help="tokens of a short text")
    parser.add_argument("--long", type=int, default=96, help="tokens of a long text")
    parser.add_argument("--long-share", type=float, default=0.2)
    parser.add_argument("--ttft-ms", type=float, default=500.0)
    parser.add_argument("--tpot-ms", type=float, default=50.0)
    parser.add_argument("--modes", default=",".join(MODES), help="live modes, comma-separated")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    if unknown := set(args.modes) - set(MODES):
        parser.error(f"unknown modes {sorted(unknown)}; choose from {', '.join(MODES)}")
    args.rates = [float(r) for r in args.rates.split(",") if r]
    args.sim_rates = [float(r) for r in args.sim_rates.split(",") if r]
    load_before = os.getloadavg()
    # the controller on the loop and collector settings `headway serve` gives it
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)
    results, profile = uvloop.run(bench(args))
    load_after = os.getloadavg()
    print(f"load average before {load_before}, after {load_after}")
    print("step profile (ms by sequences):", {n: round(t * 1e3, 2) for n, t in profile.items()})
    simulated = simulate(args, profile) if profile and args.sim_rates else []
    for mode in MODES:
        print(
            f"goodput {mode}: live {goodput(results, mode):g} req/s, simulated "
            f"{goodput(simulated, mode, 'attainment'):g} req/s"
        )
    if args.out is not None:
        options = {k: v for k, v in vars(args).items() if k != "out"}
        document = {
            "options": options,
            "load_before": load_before,
            "load_after": load_after,
            "results": results,
            "step_profile": profile,
            "simulated": simulated,
            "goodput": {m: goodput(results, m) for m in MODES},
            "goodput_simulated": {m: goodput(simulated, m, "attainment") for m in MODES},
        }
        args.out.write_text(json.dumps(document, indent=1, default=str))


if __name__ == "__main__":
    main()
