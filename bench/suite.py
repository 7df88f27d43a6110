"""The comparison suite's measurements: each system started in turn, its answers checked, then
loaded scenario by scenario (overhead, batching, open-loop, overload), with Headway's frontend
profiled when it misses a target; the raw figures saved as they arrive (`bench/run.py`)."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import harness
import models
import numpy as np
import pyspy
import targets
from harness import Endpoint, bodies, closed, open_loop, overload, quiet
from machine import machine, versions
from peers.common import WORK, Server, SetupError, check, ensure_venv
from systems import BY_NAME, System, served_name

from headway.launcher import free_port

SCENARIOS = ("overhead", "batching", "open-loop", "overload")
SLO_MS = 50.0
LOAD_LEVELS = (0.5, 0.8, 0.95)
BEST_CONCURRENCY = 32


@dataclass(frozen=True)
class Durations:
    warmup: float
    closed: float  # each closed-loop run
    open: float  # each open-loop run
    levels: tuple[float, ...]
    before: float  # overload: half capacity before the burst
    burst: float
    after: float
    drain: float  # overload: how long answers are awaited after the last send
    profile: float
    attempts: int  # closed/open runs are retried while other processes load the machine
    calm_budget: float  # seconds in all to wait for a quiet machine before measurements
    retry_budget: float  # seconds in all that repeated (disturbed) runs may take

    @classmethod
    def pick(cls, quick: bool) -> Durations:
        if quick:
            # overload: 0.3 s + 1.5 s burst + 0.5 s + 0.5 s, to keep the pass under 3 minutes
            return cls(0.3, 1.0, 1.0, (0.8,), 0.3, 1.5, 0.5, 0.5, 2.0, 1, 0.0, 0.0)
        return cls(1.0, 5.0, 6.0, LOAD_LEVELS, 3.0, 20.0, 10.0, 5.0, 10.0, 3, 120.0, 180.0)


class Suite:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick: bool = args.quick
        self.d = Durations.pick(self.quick)
        if args.overload_burst is not None:
            self.d = replace(self.d, burst=args.overload_burst, after=args.overload_burst / 2)
        self.scenarios: list[str] = args.scenarios
        self.work = WORK / ("quick" if self.quick else "full")
        self.work.mkdir(parents=True, exist_ok=True)
        self.paths = models.ensure()
        x, _ = models.dataset()
        self.load_rows = x[100:116]  # 16 distinct bodies, rotated
        self.check_rows = np.load(self.paths.rows)
        self.expected = models.reference(self.paths)
        self.data: dict[str, Any] = {
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "quick": self.quick, "scenarios": self.scenarios, "slo_ms": SLO_MS,
            "durations": self.d.__dict__, "systems": {}, "results": {s: {} for s in SCENARIOS},
        }  # fmt: skip
        self.live: list[Server] = []
        harness.CALM.budget = self.d.calm_budget
        harness.RETRIES.budget = self.d.retry_budget
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.raw = WORK / f"results-{'quick' if self.quick else 'full'}-{stamp}.json"

    def save(self) -> None:
        """Write the raw figures so far (after each system, and at the end)."""
        self.raw.write_text(json.dumps(self.data, indent=1, default=str))

    # -- helpers --------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {message}", flush=True)

    def record(self, system: System, key: str, value: Any) -> None:
        self.data["systems"].setdefault(system.name, {})[key] = value

    def error(self, system: System, where: str, exc: BaseException) -> None:
        text = str(exc) if isinstance(exc, SetupError) else f"{type(exc).__name__}: {exc}"
        self.log(f"  {system.name}: {where} failed: {text}")
        if not isinstance(exc, SetupError):
            traceback.print_exc()
        self.data["systems"].setdefault(system.name, {}).setdefault("errors", []).append(
            {"where": where, "error": text}
        )

    @contextlib.contextmanager
    def serving(self, system: System, kind: str) -> Iterator[tuple[Server, Endpoint]]:
        port = free_port()
        server = system.server(kind, self.paths, port, self.work)
        started = time.perf_counter()
        self.live.append(server)
        try:
            server.start(timeout=180.0)
            self.record(system, f"start_s_{kind}", round(time.perf_counter() - started, 1))
            yield server, Endpoint(f"http://127.0.0.1:{port}", served_name(kind))
        finally:
            killed = server.stop()
            self.live.remove(server)
            if killed:
                self.log(f"  {system.name}: had to SIGKILL {killed}")

    def payloads(self, system: System, kind: str, slo: bool = False) -> list[bytes]:
        if kind in ("mlp", "wide"):
            return bodies(self.load_rows, "FP32", None, SLO_MS if slo else None)
        return bodies(self.load_rows, "FP64", system.lr_output, SLO_MS if slo else None)

    def verify(self, system: System, kind: str, endpoint: Endpoint) -> None:
        if kind == "lr":
            payload = bodies(self.check_rows, "FP64", system.lr_output)
            result = check(endpoint.url + endpoint.path, payload, self.expected["lr"], atol=1e-9)
        else:
            payload = bodies(self.check_rows, "FP32", None)
            result = check(endpoint.url + endpoint.path, payload, self.expected[kind], atol=1e-5)
        self.record(system, f"check_{kind}", result.__dict__)
        self.log(f"  {system.name}/{kind}: answers {'OK' if result.ok else 'WRONG'}: "
                 f"{result.detail}")  # fmt: skip
        if not result.ok:
            raise SetupError(f"wrong answers from {kind}: {result.detail}")

    def closed(
        self, endpoint: Endpoint, payload: list[bytes], concurrency: int, server: Server
    ) -> dict[str, Any]:
        return quiet(lambda: closed(endpoint, payload, concurrency, self.d.closed, self.d.warmup,
                                    server), self.d.attempts)  # fmt: skip

    # -- scenarios -------------------------------------------------------------------------------
    def run_lr(self, system: System) -> None:
        wanted = [s for s in ("overhead", "open-loop") if s in self.scenarios]
        if system.name == "noop":
            wanted = ["overhead"] if "overhead" in wanted else []
        if not wanted:
            return
        kind = "noop" if system.name == "noop" else "lr"
        with self.serving(system, kind) as (server, endpoint):
            if kind == "lr":
                self.verify(system, kind, endpoint)
            payload = self.payloads(system, "lr")
            capacity = None
            if "overhead" in wanted:
                out = {}
                for c in (BEST_CONCURRENCY, 1):
                    out[f"c{c}"] = self.closed(endpoint, payload, c, server)
                    self.log(f"  {system.name} overhead c={c}: {_brief(out[f'c{c}'])}")
                self.data["results"]["overhead"][system.name] = out
                capacity = max(out["c32"]["throughput_rps"] or 0, out["c1"]["throughput_rps"] or 0)
            if kind == "noop":
                return
            if capacity is None or capacity <= 0:
                probe = self.closed(endpoint, payload, BEST_CONCURRENCY, server)
                capacity = probe["throughput_rps"] or 0.0
            self.record(system, "capacity_rps", capacity)
            slo_payload = self.payloads(system, "lr", slo=True)
            if "open-loop" in wanted and capacity > 0:
                out = {"capacity_rps": capacity}
                for level in self.d.levels:
                    figures = quiet(lambda rate=level * capacity: open_loop(
                        endpoint, slo_payload, rate, self.d.open, self.d.warmup, SLO_MS, server
                    ), self.d.attempts)  # fmt: skip
                    out[f"{level:g}"] = figures
                    self.log(f"  {system.name} open-loop {level:.0%}: {_brief(figures)}")
                self.data["results"]["open-loop"][system.name] = out

    def run_overload(self, system: System) -> None:
        """The compute-bound ``wide`` MLP (or, with ``--overload-model lr``, the overhead
        scenario's LR): capacity closed loop at 32 connections, then multiples of it."""
        if "overload" not in self.scenarios or system.name == "noop":
            return
        kind = self.args.overload_model
        self.data["overload_model"] = kind
        with self.serving(system, kind) as (server, endpoint):
            self.verify(system, kind, endpoint)
            figures = self.closed(endpoint, self.payloads(system, kind), BEST_CONCURRENCY,
                                  server)  # fmt: skip
            capacity = figures["throughput_rps"] or 0.0
            self.record(system, f"capacity_rps_{kind}", capacity)
            self.log(f"  {system.name} {kind} capacity c={BEST_CONCURRENCY}: {_brief(figures)}")
            if capacity <= 0:
                raise SetupError(f"no capacity measured on the {kind} model")
            if harness.CALM.budget > harness.CALM.waited:
                harness.CALM.wait()
            sweep: dict[str, Any] = {}
            for multiple in self.args.overload_multiples:
                counted = _refusal_counts(endpoint)
                out = overload(endpoint, self.payloads(system, kind, slo=True), capacity,
                               SLO_MS, before=self.d.before, burst=self.d.burst,
                               after=self.d.after, server=server, drain=self.d.drain,
                               multiple=multiple,
                               propagate_deadline=self.args.overload_propagate_deadline)  # fmt: skip
                out["server_refusals"] = _counts_since(_refusal_counts(endpoint), counted)
                sweep[f"{multiple:g}"] = out
                answered = out["rejection_latency_ms"]
                self.log(f"  {system.name} overload {multiple:g}x, {out['offered_rps']} req/s: "
                         f"{_brief(out)}; rejected {out['rejected']} (answered p50 "
                         f"{answered['p50']} p99 {answered['p99']} ms), recovery "
                         f"{out.get('recovery_s')} s, send lateness p99 "
                         f"{out['send_lateness_ms']['p99']} ms (own "
                         f"{out['own_send_lateness_ms']['p99']} ms, capped {out['capped']}, "
                         f"expired {out['expired']}), "
                         f"loadgen {out['loadgen_cores']} "
                         f"cores, load {out['loadavg']}; server's refusals "
                         f"{out['server_refusals']}")  # fmt: skip
            # the scenario's own figures are those at 2x (else the first multiple run)
            out = dict(sweep.get("2", next(iter(sweep.values()))))
            out["capacity_run"] = figures
            if len(sweep) > 1:
                out["sweep"] = sweep
            self.data["results"]["overload"][system.name] = out

    def run_mlp(self, system: System) -> None:
        if "batching" not in self.scenarios:
            return
        kind = "noop" if system.name == "noop" else "mlp"
        with self.serving(system, kind) as (server, endpoint):
            if kind == "mlp":
                self.verify(system, kind, endpoint)
            figures = self.closed(endpoint, self.payloads(system, "mlp"), BEST_CONCURRENCY, server)
            self.data["results"]["batching"][system.name] = figures
            self.log(f"  {system.name} batching: {_brief(figures)}")

    def run_system(self, system: System) -> None:
        self.log(f"{system.name}: {system.label}")
        if system.venv is not None:
            try:
                self.log(f"  venv {system.venv} (created once; pip log in .work/logs)")
                ensure_venv(system.venv, WORK / "logs" / f"venv-{system.venv}.log")
            except SetupError as exc:
                self.error(system, "install", exc)
                return
            self.record(system, "versions", versions(system))
        else:
            self.record(system, "versions", versions(system))
        for step, kind in ((self.run_lr, "lr"), (self.run_mlp, "mlp"),
                           (self.run_overload, "wide")):  # fmt: skip
            if kind not in system.kinds and system.name != "noop":
                continue
            try:
                step(system)
            except Exception as exc:
                self.error(system, kind, exc)

    def drift(self) -> None:
        """Headway's overhead once more at the end: how much the machine moved under us."""
        system = BY_NAME["headway"]
        try:
            with self.serving(system, "lr") as (server, endpoint):
                payload = self.payloads(system, "lr")
                out = {f"c{c}": self.closed(endpoint, payload, c, server)
                       for c in (BEST_CONCURRENCY, 1)}  # fmt: skip
            self.data["drift"] = out
            self.log(f"headway again: c=32 {_brief(out['c32'])}; c=1 {_brief(out['c1'])}")
        except Exception as exc:
            self.error(system, "drift", exc)

    def profile(self, overhead: bool, overload: bool) -> None:
        """py-spy on Headway's frontend: when ``overhead``, under the overhead load (LR, 32
        connections, then 1); when ``overload``, under Poisson arrivals at twice its capacity
        on the overload scenario's model (the wide MLP)."""
        system = BY_NAME["headway"]
        runs: list[tuple[str, list[tuple[str, float, dict[str, Any]]]]] = []
        if overhead:
            runs.append(("lr", [
                (f"c{BEST_CONCURRENCY}", self.d.profile, {"concurrency": BEST_CONCURRENCY}),
                ("c1", self.d.profile / 2, {"concurrency": 1}),
            ]))  # fmt: skip
        capacity = _get(self.data, "systems", "headway", "capacity_rps_wide")
        if overload and capacity:
            runs.append(("wide", [("overload", self.d.profile, {"offered": 2.0 * capacity})]))
        try:
            binary = ensure_venv("tools", WORK / "logs" / "venv-tools.log").with_name("py-spy")
            out: dict[str, Any] = {}
            for kind, loads in runs:
                with self.serving(system, kind) as (server, endpoint):
                    for key, seconds, how in loads:
                        payload = self.payloads(system, kind, slo="offered" in how)
                        summary = pyspy.record(binary, server, endpoint, payload,
                                               self.work / f"profile-headway-{key}.txt",
                                               seconds, **how)  # fmt: skip
                        summary["model"] = kind
                        out[key] = summary
                        self.log(f"profile {key}: frontend busy {summary['busy']} core at "
                                 f"{summary['load_rps']} req/s; {summary['parts'][:3]}")  # fmt: skip
            self.data["profile"] = out
        except Exception as exc:
            self.data["profile"] = {"error": str(exc)}
            self.error(system, "profile", exc)

    def run(self, systems: list[System]) -> dict[str, Any]:
        started = time.perf_counter()
        self.data["machine"] = machine()
        if "batching" in self.scenarios:
            self.log("MLP in-process limit (no serving, 1 thread)")
            self.data["inprocess"] = models.in_process_limit(
                self.paths, seconds=0.2 if self.quick else 0.5
            )
            self.log(f"  {self.data['inprocess']['rows_per_s']} rows/s at batch "
                     f"{self.data['inprocess']['best_batch']}")  # fmt: skip
        for system in systems:
            self.run_system(system)
            self.save()
        if not self.quick and "overhead" in self.scenarios:
            self.drift()
            targets.settle(self.data)
            self.data["settled"] = True
        self.data["targets"] = targets.targets(self.data)
        missed = [t for t in self.data["targets"] if t["met"] is False]
        wanted = self.args.profile if self.args.profile is not None else not self.quick
        if missed and wanted:
            self.log(f"{len(missed)} target(s) missed: profiling the Headway frontend")
            self.profile(
                overhead=any(not t["name"].startswith("overload") for t in missed),
                overload=any(t["name"].startswith("overload") for t in missed),
            )
            self.save()
        self.data["machine"]["load_after"] = os.getloadavg()
        self.data["calm_waited_s"] = round(harness.CALM.waited, 1)
        self.data["retried_s"] = round(harness.RETRIES.spent, 1)
        self.data["wall_s"] = round(time.perf_counter() - started, 1)
        return self.data

    def stop_all(self) -> None:
        for server in list(self.live):
            with contextlib.suppress(Exception):
                server.stop()


def _get(d: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _brief(f: dict[str, Any]) -> str:
    lat = f.get("latency_ms") or {}
    good = f" goodput {f['goodput_rps']}/s" if f.get("slo_ms") else ""
    bad = f.get("requests", 0) - f.get("ok", 0)
    return (
        f"{f.get('throughput_rps')} req/s{good} p50 {lat.get('p50')} p99 {lat.get('p99')} ms"
        f" (not ok {bad}; server {f.get('server_cores')} cores, other {f.get('other_cores')})"
    )


_REFUSAL_EVENTS = ("dropped", "rejected_at_admission", "refused_unread", "refusals")


def _refusal_counts(endpoint: Endpoint) -> dict[str, float]:
    """The server's refusal counters from /metrics by event and reason (Headway only; {}
    elsewhere): where an overload's 503s were decided."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{endpoint.url}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        for event in _REFUSAL_EVENTS:
            if line.startswith(f"headway_{event}_total{{"):
                labels, _, value = line.rpartition(" ")
                reason = labels.partition('reason="')[2].partition('"')[0]
                name = f"{event}:{reason}" if reason else event
                counts[name] = counts.get(name, 0.0) + float(value)
    return counts


def _counts_since(now: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    return {
        k: int(v - before.get(k, 0.0)) for k, v in sorted(now.items()) if v > before.get(k, 0.0)
    }
