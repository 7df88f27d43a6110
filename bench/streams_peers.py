"""Headway's streaming of the demo's text generator against LitServe's and Ray Serve's
streaming of the same model: tokens/s, p99 time to first token, and goodput as DistServe
defines it, at the same offered loads, in one run.

The same model everywhere: `headway.textgen`'s `tiny-gpt`, trained once (or read from the
textgen cache), its one version folder read by every system; each peer runs the same
`Generator` (`peers/textgen_peer.py`) in its own venv (`peers/litserve_stream/`,
`peers/ray_stream/`, created on first use over this interpreter's torch and ray). Before
anything is timed, each system's text for a few seeded prompts is checked equal to the
text made in this process.

- ``headway``: `headway serve`, one worker, the model `generative: {max_sequences,
  batching: iteration}`: iteration-level batching, requests carrying their targets
  (``ttft_ms``, ``tpot_ms``) so that what cannot meet them is refused at once (a miss).
- ``litserve``: `stream=True`, a generator `predict`, LitServe's batching with streaming
  (`BatchedStreamingLoop`): request-level, up to max_sequences per batch.
- ``litserve-continuous``: LitServe's `ContinuousBatchingLoop` (exported, not in its docs'
  pages): iteration-level, up to max_sequences at once; no admission control.
- ``ray``: a deployment answering a `StreamingResponse` over `@serve.batch` on an async
  generator: request-level, up to max_sequences per batch.

One load generator drives all (`headway.loadgen.streams`: OpenAI's `/v1/completions` with
`stream: true` over raw HTTP/1.1, each event stamped as it is read) with `bench/streams.py`'s
traffic: Poisson arrivals at each rate of ``--rates`` for ``--duration`` seconds, each request
a prompt and a length from a long-tailed mix (`ignore_end`, so each text has its length), the
same arrivals, prompts, lengths and seeds for every system. Systems take turns, one at a time
(each started for its turn and stopped after it, so an idle peer takes no CPU from the one
measured), their order reversed each round.

Per request: TTFT from its scheduled send time, TPOT the mean gap after the first token. A
request attains when it ended well within both targets; a refused or failed one is a miss.
Goodput: the highest rate swept at which at least 90% of offered requests attain (pooled
over rounds). Tokens/s: tokens received over the seconds from the first arrival to the last
token.

    PYTHONPATH=src python bench/streams_peers.py [--quick] [--rates 8,16,32,64] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH / "peers")]

import textgen_peer  # noqa: E402
from bench.peers.common import Server, SetupError, ensure_venv  # noqa: E402
from bench.streams import CACHE, PROMPTS, arrivals  # noqa: E402

from headway import textgen  # noqa: E402
from headway.launcher import free_port  # noqa: E402
from headway.loadgen.client import Target  # noqa: E402
from headway.loadgen.streams import OK, StreamLoad, StreamRecord, summarize  # noqa: E402

WORK = BENCH / ".work" / "streams-peers"
MODEL = "tiny-gpt"
SYSTEMS = ("headway", "litserve", "litserve-continuous", "ray")


def repository(root: Path, args: argparse.Namespace) -> Path:
    """The text generator under `root`; its version folder (what the peers read)."""
    textgen.build(
        root, name=MODEL, cache=CACHE, progress=print,
        generation={"max_sequences": args.max_sequences, "max_parts": args.long,
                    "batching": "iteration"},
        extra={"max_queue": 4096},
    )  # fmt: skip
    return root / MODEL / "1"


def server(system: str, root: Path, port: int, args: argparse.Namespace) -> Server:
    """`system` serving the text generator under `root` on `port` (not started)."""
    weights = str(root / MODEL / "1")
    peers_path = {"PYTHONPATH": os.pathsep.join([args.headway_src, str(BENCH / "peers")])}
    if system == "headway":
        return Server(
            system,
            [sys.executable, "-m", "headway.cli.main", "serve", "--repository", str(root),
             "--port", str(port), "--grpc-port", "0", "--state", str(root / "state.db")],
            f"http://127.0.0.1:{port}/v2/models/{MODEL}/ready", WORK / "headway.log",
            env={"PYTHONPATH": args.headway_src},
        )  # fmt: skip
    if system.startswith("litserve"):
        python = ensure_venv("litserve_stream", WORK / "litserve-venv.log",
                             system_site_packages=True)  # fmt: skip
        loop = "continuous" if system == "litserve-continuous" else "batched"
        return Server(
            system,
            [str(python), str(BENCH / "peers" / "litserve_stream" / "app.py"), "--weights",
             weights, "--port", str(port), "--loop", loop, "--batch", str(args.max_sequences),
             "--wait-ms", str(args.wait_ms)],
            f"http://127.0.0.1:{port}/health", WORK / f"{system}.log", env=peers_path,
        )  # fmt: skip
    python = ensure_venv("ray_stream", WORK / "ray-venv.log", system_site_packages=True)
    return Server(
        system,
        [str(python), str(BENCH / "peers" / "ray_stream" / "app.py"), "--weights", weights,
         "--port", str(port), "--batch", str(args.max_sequences), "--wait-ms",
         str(args.wait_ms), "--temp-dir", f"/tmp/hwstreams-ray-{port}"],
        f"http://127.0.0.1:{port}/-/healthz", WORK / "ray.log", env=peers_path,
    )  # fmt: skip


def body(prompt: str, tokens: int, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One completions request; the targets ride along (Headway schedules by them, the peers
    ignore them)."""
    return {
        "model": MODEL, "prompt": prompt, "max_tokens": tokens, "stream": True, "seed": seed,
        "ttft_ms": args.ttft_ms, "tpot_ms": args.tpot_ms, "parameters": {"ignore_end": True},
    }  # fmt: skip


def plan(rate: float, args: argparse.Namespace) -> tuple[list[float], list[bytes]]:
    """Arrival offsets at `rate` for `--duration` and each one's body: `bench/streams.py`'s
    traffic (the same seed per rate), the same for every system."""
    offsets: list[float] = []
    bodies: list[bytes] = []
    for number, (at, prompt, tokens) in enumerate(
        arrivals(rate, args.duration, args, seed=int(rate * 1000))
    ):
        offsets.append(at)
        bodies.append(json.dumps(body(prompt, tokens, number, args)).encode())
    return offsets, bodies


def stream_text(url: str, request: dict[str, Any]) -> str:
    """The text of one streamed completion."""
    text = []
    with (
        httpx.Client(trust_env=False, timeout=60) as client,
        client.stream("POST", f"{url}/v1/completions", json=request) as response,
    ):
        if response.status_code != 200:
            raise SetupError(f"HTTP {response.status_code}: {response.read()[:300]!r}")
        for line in response.iter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                choice = json.loads(line[5:])["choices"][0]
                text.append(choice.get("text") or "")
    return "".join(text)


def expected_texts(weights: Path, args: argparse.Namespace) -> list[tuple[dict[str, Any], str]]:
    """A few seeded requests and the text this process makes for each."""
    model = textgen_peer.generator(str(weights))
    out = []
    for seed, prompt in enumerate(PROMPTS[:3]):
        request = body(prompt, 12, 100 + seed, args)
        parts = [
            step[0] for step in textgen_peer.whole_batch(model, [textgen_peer.request(request)])
        ]
        out.append((request, "".join(p[0] for p in parts if p is not None)))
    return out


def check(system: str, url: str, expected: list[tuple[dict[str, Any], str]]) -> None:
    """The system writes the same text as this process for each seeded request."""
    for request, want in expected:
        got = stream_text(url, request)
        if got != want:
            raise SetupError(f"{system} wrote {got!r} for {request['prompt']!r}, not {want!r}")


def measure(url: str, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    offsets, bodies = plan(rate, args)
    target = Target.parse(url)
    load = StreamLoad(target, "/v1/completions", bodies, timeout=args.timeout)
    start = time.perf_counter()
    records: list[StreamRecord] = asyncio.run(load.open(offsets))
    # every request of the plan counts: its offsets all fall within `--duration` of the
    # load's own start, a moment after `start`
    window = (start, start + args.duration + 1.0)
    figures = summarize(records, window, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms)
    ends = [r.last for r in records if r.last is not None]
    span = (max(ends) if ends else time.perf_counter()) - start
    tokens = sum(r.parts for r in records)
    met = round(figures["slo_attainment"] * figures["requests"]) if figures["requests"] else 0
    return {
        **figures, "rate": rate, "tokens": tokens, "span_s": round(span, 3),
        "tokens_per_s": round(tokens / span, 1) if span > 0 else 0.0, "met": met,
        "ttft_all_ms": [round(r.ttft * 1e3, 2) for r in records
                        if r.outcome == OK and r.ttft is not None],
    }  # fmt: skip


def turn(system: str, root: Path, args: argparse.Namespace,
         expected: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:  # fmt: skip
    """Start `system`, check its text, measure every rate, stop it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    running = server(system, root, port, args).start(timeout=300)
    try:
        check(system, url, expected)
        for request, _ in expected:  # warm: a few streams before the clock
            stream_text(url, request)
        results = []
        for rate in args.rates:
            time.sleep(1.0)  # let the last rate's tail settle
            figures = measure(url, rate, args)
            results.append({"system": system, **figures})
            print(line(system, figures), flush=True)
        return results
    finally:
        running.stop()


def line(system: str, s: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    return (
        f"{system:20} {s['rate']:5.1f}/s: {s['completed']}/{s['requests']} ended, "
        f"{s['rejected']} refused, {s['failed']} failed, {s['tokens_per_s']:6.0f} tok/s, "
        f"TTFT p50 {ms(s['ttft_ms']['p50'])} p99 {ms(s['ttft_ms']['p99'])} ms, TPOT p50 "
        f"{ms(s['tpot_ms']['p50'])} p99 {ms(s['tpot_ms']['p99'])} ms, "
        f"attained {s['slo_attainment']:.0%}"
    )


def pooled(results: list[dict[str, Any]], system: str, rate: float) -> dict[str, Any]:
    """One system at one rate over all rounds."""
    runs = [r for r in results if r["system"] == system and r["rate"] == rate]
    offered = sum(r["requests"] for r in runs)
    ttfts = sorted(t for r in runs for t in r["ttft_all_ms"])
    p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] if ttfts else None
    return {
        "attained": sum(r["met"] for r in runs) / offered if offered else 0.0,
        "tokens_per_s": sum(r["tokens_per_s"] for r in runs) / len(runs) if runs else 0.0,
        "ttft_p99_ms": p99,
        "refused": sum(r["rejected"] for r in runs),
        "failed": sum(r["failed"] for r in runs),
        "offered": offered,
    }


def goodput(results: list[dict[str, Any]], system: str, rates: list[float]) -> float:
    """DistServe's goodput: the highest rate swept at which 90% of requests attained."""
    return max((r for r in rates if pooled(results, system, r)["attained"] >= 0.9), default=0.0)


def report(results: list[dict[str, Any]], args: argparse.Namespace,
           skipped: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    systems = [s for s in args.systems if s not in skipped]
    table = {s: {str(r): pooled(results, s, r) for r in args.rates} for s in systems}
    goodputs = {s: goodput(results, s, args.rates) for s in systems}
    peers = [s for s in systems if s != "headway"]
    best = max(peers, key=lambda s: goodputs[s], default=None)
    print("\nrate  " + "".join(f"{s:>34}" for s in systems))
    for rate in args.rates:
        cells = []
        for s in systems:
            p = table[s][str(rate)]
            ttft = "-" if p["ttft_p99_ms"] is None else f"{p['ttft_p99_ms']:.0f}"
            cells.append(f"{p['tokens_per_s']:7.0f} tok/s {ttft:>6} ms {p['attained']:5.0%}")
        print(f"{rate:5.1f} " + "".join(f"{c:>34}" for c in cells))
    for s in systems:
        print(f"goodput {s}: {goodputs[s]:g} req/s")
    if best is not None and "headway" in goodputs:
        ratio = goodputs["headway"] / goodputs[best] if goodputs[best] else float("inf")
        print(f"headway / best peer ({best}) goodput: {ratio:.2f}x")
    for s, why in skipped.items():
        print(f"{s} left out: {why}")
    return {"table": table, "goodput": goodputs, "best_peer": best}


def markdown(results: list[dict[str, Any]], systems: list[str], rates: list[float]) -> str:
    """The per-rate table of bench/RESULTS-streams.md: each round's tokens/s, the rest pooled."""
    rows = [
        "| offered req/s | system | attained | tokens/s (each round) | p99 TTFT ms | "
        "p99 TPOT ms (worst round) | refused | failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate in rates:
        for system in systems:
            runs = [r for r in results if r["system"] == system and r["rate"] == rate]
            if not runs:
                continue
            p = pooled(results, system, rate)
            tokens = " / ".join(f"{r['tokens_per_s']:,.0f}" for r in runs)
            tpots = [r["tpot_ms"]["p99"] for r in runs if r["tpot_ms"]["p99"] is not None]
            ttft = "-" if p["ttft_p99_ms"] is None else f"{p['ttft_p99_ms']:,.0f}"
            tpot = f"{max(tpots):,.0f}" if tpots else "-"
            rows.append(
                f"| {rate:g} | {system} | {p['attained']:.0%} | {tokens} | {ttft} | {tpot} | "
                f"{p['refused']} of {p['offered']} | {p['failed']} |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="one round of short runs at three rates: a check that all works")  # fmt: skip
    parser.add_argument(
        "--rates", default=None, help="requests/s, comma-separated (default 8,16,32,48,64,72,80)"
    )
    parser.add_argument("--duration", type=float, default=6.0, help="seconds of arrivals")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--max-sequences", type=int, default=16,
                        help="sequences stepped at once, every system")  # fmt: skip
    parser.add_argument("--wait-ms", type=float, default=10.0, help="the peers' batching wait")
    parser.add_argument("--short", type=int, default=16, help="tokens of a short text")
    parser.add_argument("--long", type=int, default=96, help="tokens of a long text")
    parser.add_argument("--long-share", type=float, default=0.2)
    parser.add_argument("--ttft-ms", type=float, default=500.0)
    parser.add_argument("--tpot-ms", type=float, default=50.0)
    parser.add_argument("--timeout", type=float, default=20.0, help="longest wait for a stream")
    parser.add_argument("--headway-src", default=str(BENCH.parent / "src"),
                        help="the Headway tree its server runs (PYTHONPATH)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--render", type=Path, default=None,
                        help="print the tables of a run's JSON (--out) and measure nothing")  # fmt: skip
    args = parser.parse_args()
    if args.render is not None:
        run = json.loads(args.render.read_text())
        options, results = run["options"], run["results"]
        systems = [s for s in options["systems"] if s not in run["skipped"]]
        print(markdown(results, systems, options["rates"]))
        for system in systems:
            print(f"goodput {system}: {goodput(results, system, options['rates']):g} req/s")
        return
    if args.quick:
        args.duration, args.rounds = 4.0, 1
        args.rates = args.rates or "8,32,64"
    args.rates = [float(r) for r in (args.rates or "8,16,32,48,64,72,80").split(",")]
    args.systems = [s for s in args.systems.split(",") if s]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}: pick from {', '.join(SYSTEMS)}")
    root = Path(tempfile.mkdtemp(prefix="headway-streams-peers-"))
    weights = repository(root, args)
    expected = expected_texts(weights, args)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    results: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for number in range(args.rounds):
        order = args.systems if number % 2 == 0 else args.systems[::-1]
        for system in order:
            if system in skipped:
                continue
            try:
                results.extend(turn(system, root, args, expected))
            except SetupError as exc:
                skipped[system] = str(exc)
                print(f"{system} left out: {exc}", flush=True)
    summary = report(results, args, skipped)
    uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"uptime before: {uptime}\nuptime after:  {uptime_after}")
    if args.out is not None:
        options = {k: v for k, v in vars(args).items() if k != "out"}
        args.out.write_text(json.dumps({
            "command": " ".join(sys.argv), "started": started, "machine": platform.node(),
            "cpus": os.cpu_count(), "uptime_before": uptime, "uptime_after": uptime_after,
            "options": options, "skipped": skipped, "summary": summary, "results": results,
        }, indent=1, default=str))  # fmt: skip


if __name__ == "__main__":
    main()
