"""Headway side by side with the serving systems people would otherwise pick (issue 3).

Every system serves the same model in its own virtual environment (``bench/.venvs/<system>``,
made from ``bench/peers/<system>/requirements.txt``), answers the same Open Inference Protocol
request bodies, is checked for correct answers before it is timed, and is loaded by the same
load generator (``headway.loadgen``), in turn, in one run. ``bench/RESULTS.md`` gets one table
per workload, every figure also as a ratio to Headway's, the versions and the machine.

    python bench/run.py                     # everything (~23 min; venvs once, before that)
    python bench/run.py --quick             # every scenario, short, one config per product
    python bench/run.py --only ray,mlserver --scenarios overhead,overload

Scenarios: ``overhead`` (LogisticRegression, one row, closed loop at 32 and 1 connections),
``batching`` (PyTorch MLP, one row, 32 connections, against its in-process limit),
``open-loop`` (Poisson at 50/80/95 % of each system's own capacity, 50 ms SLO) and ``overload``
(the compute-bound ``wide`` MLP, 20 -> 2048 -> 2048 -> 2: each system's capacity on it, closed
loop at 32 connections, then Poisson at 2x that capacity for 20 s between two stretches at half
of it: goodput within the 50 ms SLO, goodput / capacity, p99 of the 200s, rejections, time to
recover, and the load generator's send lateness, which shows it kept to the schedule). The
overload model is compute-bound on purpose: a server's capacity on it is a few thousand
requests/s, so that 2x stays well within what the load generator sends on the same 2 cores and
the bottleneck is the model, which a deadline-aware scheduler must shed for. Headway (the
reference of every ratio) and, for ``overhead``/``batching``, the no-op HTTP ceiling always run.
A run of some scenarios rewrites only their sections of the results file; the others' sections
(and their target rows) are kept from the previous file, marked as from an earlier run.
Never run in CI: nothing under tests/ imports bench/.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

import results
from peers.common import AUTOGROUP_NICE, WORK, set_autogroup_nice
from suite import SCENARIOS, Suite
from systems import BY_NAME, QUICK, SYSTEMS


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short runs, one configuration per product (under 3 minutes)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated systems (Headway always runs): {', '.join(BY_NAME)}",
    )
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated: {', '.join(SCENARIOS)}"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="markdown file (default: bench/RESULTS.md, or "
        "bench/.work/RESULTS-quick.md with --quick)",
    )
    parser.add_argument(
        "--overload-multiples",
        default="2",
        help="comma-separated multiples of capacity offered in the overload burst, one run each "
        "(default 2; e.g. 0.8,1,1.5,2,3,5 for the issue's sweep)",
    )
    parser.add_argument(
        "--overload-burst",
        type=float,
        default=None,
        help="seconds of each overload burst (default 20, or 1.5 with --quick); the half-load "
        "stretch after it lasts half as long",
    )
    parser.add_argument(
        "--overload-model",
        choices=("wide", "lr"),
        default="wide",
        help="the overload scenario's model: the compute-bound wide MLP (default), or the "
        "overhead scenario's LogisticRegression, where the frontend is the bottleneck",
    )
    parser.add_argument(
        "--overload-propagate-deadline",
        action="store_true",
        help="the overload scenario's client propagates each request's deadline: one that "
        "waited for a connection is sent with the time it has left as its slo_ms, and one "
        "with none left is not sent (as a gRPC client does)",
    )
    parser.add_argument(
        "--autogroup-nice",
        type=int,
        default=None,
        help="give each server's session this autogroup nice (e.g. -10), and this process's "
        "own when it leads its session (start it with setsid): with autogroups on, other "
        "sessions' nice 19 jobs otherwise take as much CPU as the server under test",
    )
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="py-spy Headway's frontend when it misses a target (default: yes, not with --quick)",
    )
    args = parser.parse_args()  # fmt: skip
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    try:
        args.overload_multiples = [float(m) for m in args.overload_multiples.split(",") if m]
    except ValueError:
        parser.error(
            f"--overload-multiples: numbers separated by commas, not {args.overload_multiples!r}"
        )
    if not args.overload_multiples or min(args.overload_multiples) <= 0:
        parser.error("--overload-multiples: at least one multiple, each above 0")
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {SCENARIOS}")
    names = [s.name for s in SYSTEMS]
    if args.only:
        chosen = [n.strip() for n in args.only.split(",") if n.strip()]
        bad = [n for n in chosen if n not in BY_NAME]
        if bad:
            parser.error(f"unknown system(s) {bad}; choose from {names}")
        names = [n for n in names if n in chosen or n == "headway"]
        if {"overhead", "batching"} & set(args.scenarios) and "noop" not in names:
            names.insert(1, "noop")
    elif args.quick:
        names = [n for n in names if n in QUICK]
    output = args.output or (WORK / "RESULTS-quick.md" if args.quick else
                             Path(__file__).resolve().parent / "RESULTS.md")  # fmt: skip

    if args.autogroup_nice is not None:
        os.environ[AUTOGROUP_NICE] = str(args.autogroup_nice)
        if os.getsid(0) == os.getpid():
            set_autogroup_nice(os.getpid())
    suite = Suite(args)

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        data = suite.run([BY_NAME[n] for n in names])
    finally:
        suite.stop_all()
        suite.save()  # what was measured, even when the run stopped early
    raw = suite.raw
    previous = output.read_text() if output.exists() else None
    output.write_text(results.markdown(data, raw, previous))
    suite.log(f"done in {data['wall_s']} s: {output} (raw figures: {raw})")
    for target in data["targets"]:
        mark = {True: "met", False: "MISSED", None: "n/a"}[target["met"]]
        suite.log(f"  [{mark}] {target['name']}: {target['detail']}")


if __name__ == "__main__":
    main()
