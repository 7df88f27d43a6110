"""The figures of one suite run as ``RESULTS.md``: targets, one table per workload with every
figure also as a ratio to Headway's, the profile, the versions and the machine.

A hand-written reading kept between ``<!-- reading -->`` and ``<!-- /reading -->`` in the
previous file, and ``bench/overhead.py``'s section (``<!-- overhead.py -->``), are carried over
into the new one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from systems import SYSTEMS

PEER_FAMILIES = {"ray": "Ray Serve", "litserve": "LitServe", "mlserver": "MLServer",
                 "bentoml": "BentoML"}  # fmt: skip
READING = re.compile(r"<!-- reading -->.*?<!-- /reading -->", re.S)
OVERHEAD = re.compile(r"<!-- overhead.py -->.*?<!-- /overhead.py -->", re.S)
#: Frames every stack starts with (process entry, CLI, server start): not where time goes.
ENTRY = ("click/", "runpy", "headway/cli/", "uvicorn/server.py", "uvicorn/_compat.py",
         "asyncio/runners.py")  # fmt: skip


def _get(d: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _tput(figures: Any) -> float | None:
    value = _get(figures, "throughput_rps")
    return float(value) if value else None


def best_of_family(
    data: dict[str, Any], family: str, scenario: str, key: str | None
) -> tuple[str, float] | None:
    """The configuration of ``family`` with the highest throughput in ``scenario``."""
    best: tuple[str, float] | None = None
    for system in SYSTEMS:
        if system.family != family:
            continue
        figures = data["results"][scenario].get(system.name)
        value = _tput(figures[key] if key and figures else figures)
        if value is not None and (best is None or value > best[1]):
            best = (system.name, value)
    return best


def settle(data: dict[str, Any]) -> None:
    """Headway's overhead is measured twice (first, and again at the end of the run): for each
    concurrency keep the run that other processes disturbed less, as ``harness.quiet`` does
    with repeated runs. The other one stays in ``data["drift"]`` for the record."""
    main = data["results"]["overhead"].get("headway")
    again = data.get("drift")
    if not main or not again:
        return
    for key in ("c32", "c1"):
        if key in again and again[key]["other_cores"] < main[key]["other_cores"]:
            main[key], again[key] = again[key], main[key]
            main[key]["kept"] = "end of run (less disturbed)"
            again[key]["kept"] = "no"


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Headway's targets from issues 2 and 3, each met (True), missed (False) or unmeasured."""
    res = data["results"]
    out: list[dict[str, Any]] = []

    def add(name: str, met: bool | None, detail: str) -> None:
        out.append({"name": name, "met": met, "detail": detail})

    h32 = _tput(_get(res, "overhead", "headway", "c32"))
    h1 = _get(res, "overhead", "headway", "c1", "latency_ms")
    for family, title in PEER_FAMILIES.items():
        best = best_of_family(data, family, "overhead", "c32")
        name = f"overhead c=32: Headway >= 4x best {title} config"
        if h32 is None or best is None:
            add(name, None, "not measured (see errors)")
        else:
            add(
                name,
                h32 >= 4 * best[1],
                f"{h32:,.0f} vs {best[1]:,.0f} req/s ({best[0]}): {h32 / best[1]:.2f}x",
            )
    noop = _tput(_get(res, "overhead", "noop", "c32"))
    name = "overhead c=32: Headway >= 80% of the no-op app"
    if h32 and noop:
        add(name, h32 >= 0.8 * noop, f"{h32:,.0f} vs {noop:,.0f} req/s: {h32 / noop:.0%}")
    else:
        add(name, None, "not measured")
    inline = _get(res, "overhead", "starlette")
    i32 = _tput(_get(inline, "c32"))
    i1 = _get(inline, "c1", "latency_ms")
    name = "overhead c=1: Headway p50 <= the bare inline app's"
    if h1 and i1:
        add(name, h1["p50"] <= i1["p50"], f"{h1['p50']:.3f} vs {i1['p50']:.3f} ms")
    else:
        add(name, None, "not measured")
    name = "batching: Headway >= 70% of min(in-process limit, HTTP ceiling)"
    hb = _tput(_get(res, "batching", "headway"))
    ceiling = _tput(_get(res, "batching", "noop"))
    limit = _get(data, "inprocess", "rows_per_s")
    if hb and (ceiling or limit):
        bound = min(v for v in (ceiling, limit) if v)
        which = "HTTP ceiling" if bound == ceiling else "in-process limit"
        add(name, hb >= 0.7 * bound,
            f"{hb:,.0f} rows/s vs {which} {bound:,.0f}: {hb / bound:.0%} (in-process limit "
            f"{limit or 0:,.0f} rows/s: {hb / limit if limit else 0:.0%})")  # fmt: skip
    else:
        add(name, None, "not measured")
    name = "overload: Headway goodput >= 90% of its capacity"
    ho = _get(res, "overload", "headway")
    if ho and ho.get("capacity_rps"):
        ratio = (ho["goodput_rps"] or 0) / ho["capacity_rps"]
        add(
            name,
            ratio >= 0.9,
            f"{ho['goodput_rps']:,.0f} vs {ho['capacity_rps']:,.0f} req/s: {ratio:.0%}",
        )
    else:
        add(name, None, "not measured")
    # issue 2's subset (bench/overhead.py measures these on their own too)
    name = "issue 2: overhead c=32: Headway >= 2x the bare inline app"
    if h32 and i32:
        add(name, h32 >= 2 * i32, f"{h32:,.0f} vs {i32:,.0f} req/s: {h32 / i32:.2f}x")
    else:
        add(name, None, "not measured")
    name = "issue 2: overhead c=1: p50 within 0.5 ms and p99 within 1 ms of the inline app"
    if h1 and i1:
        d50, d99 = h1["p50"] - i1["p50"], h1["p99"] - i1["p99"]
        add(name, d50 <= 0.5 and d99 <= 1.0, f"p50 {d50:+.3f} ms, p99 {d99:+.3f} ms")
    else:
        add(name, None, "not measured")
    return out


# -- formatting -------------------------------------------------------------------------------------
def _n(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(value: Any, reference: Any) -> str:
    if not value or not reference:
        return "-"
    return f"{value / reference:.2f}x"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _systems_in(data: dict[str, Any], scenario: str) -> list[str]:
    return [s.name for s in SYSTEMS if s.name in data["results"][scenario]]


def _overhead(data: dict[str, Any]) -> list[str]:
    res = data["results"]["overhead"]
    h = res.get("headway", {})
    h32, h1 = h.get("c32", {}), h.get("c1", {})
    rows = []
    for name in _systems_in(data, "overhead"):
        c32, c1 = res[name]["c32"], res[name]["c1"]
        rows.append([
            name, _n(c32["throughput_rps"]), _ratio(c32["throughput_rps"], h32.get("throughput_rps")),
            _ms(c32["latency_ms"]["p50"]), _ms(c32["latency_ms"]["p99"]),
            _n(c1["throughput_rps"]), _ms(c1["latency_ms"]["p50"]),
            _ratio(c1["latency_ms"]["p50"], _get(h1, "latency_ms", "p50")),
            _ms(c1["latency_ms"]["p99"]), _ratio(c1["latency_ms"]["p99"], _get(h1, "latency_ms", "p99")),
            str(c32["requests"] - c32["ok"]), f"{c32['server_cores']} / {c32['other_cores']}",
        ])  # fmt: skip
    header = ["system", "c=32 req/s", "÷ Headway", "c=32 p50 ms", "c=32 p99 ms", "c=1 req/s",
              "c=1 p50 ms", "÷ Headway", "c=1 p99 ms", "÷ Headway", "c=32 not 200",
              "c=32 cores: server / others"]  # fmt: skip
    return _table(header, rows)


def _batching(data: dict[str, Any]) -> list[str]:
    res = data["results"]["batching"]
    href = _tput(res.get("headway"))
    rows = []
    for name in _systems_in(data, "batching"):
        f = res[name]
        rows.append(
            [
                name,
                _n(f["throughput_rps"]),
                _ratio(f["throughput_rps"], href),
                _ms(f["latency_ms"]["p50"]),
                _ms(f["latency_ms"]["p99"]),
                str(f["requests"] - f["ok"]),
                f"{f['server_cores']} / {f['other_cores']}",
            ]
        )
    lines = _table(["system", "rows/s (= req/s)", "÷ Headway", "p50 ms", "p99 ms", "not 200",
                    "cores: server / others"], rows)  # fmt: skip
    limit = data.get("inprocess")
    if limit:
        sizes = ", ".join(f"{k.split('@')[1]}: {v:,.0f}" for k, v in limit.items() if "@" in k)
        ceiling = _tput(res.get("noop"))
        lines += ["", f"In-process limit (TorchScript MLP, {limit['threads']} thread, no serving): "
                  f"**{limit['rows_per_s']:,.0f} rows/s** at batch {limit['best_batch']} "
                  f"(rows/s by batch size: {sizes})."]  # fmt: skip
        if href:
            lines.append(f"Headway served {href:,.0f} rows/s = **{href / limit['rows_per_s']:.0%} "
                         f"of the in-process limit**"
                         + (f" and {href / ceiling:.0%} of the HTTP ceiling (no-op app, "
                            f"{ceiling:,.0f} req/s)." if ceiling else "."))  # fmt: skip
    return lines


def _open_loop(data: dict[str, Any]) -> list[str]:
    res = data["results"]["open-loop"]
    levels = [f"{x:g}" for x in data["durations"]["levels"]]
    h = res.get("headway", {})
    header = ["system", "capacity req/s"]
    for level in levels:
        pct = f"{float(level):.0%}"
        header += [f"{pct}: goodput req/s", "÷ Headway", "attained", "p99 ms"]
    rows = []
    for name in _systems_in(data, "open-loop"):
        row = [name, _n(res[name]["capacity_rps"])]
        for level in levels:
            f = res[name].get(level)
            if not f:
                row += ["-"] * 4
                continue
            row += [_n(f["goodput_rps"]), _ratio(f["goodput_rps"], _get(h, level, "goodput_rps")),
                    f"{f['slo_attainment']:.1%}" if f["slo_attainment"] is not None else "-",
                    _ms(f["latency_ms"]["p99"])]  # fmt: skip
        rows.append(row)
    return _table(header, rows)


def _overload(data: dict[str, Any]) -> list[str]:
    res = data["results"]["overload"]
    h = res.get("headway", {})
    rows = []
    for name in _systems_in(data, "overload"):
        f = res[name]
        frac = (f["goodput_rps"] or 0) / f["capacity_rps"] if f.get("capacity_rps") else None
        if f.get("recovered"):
            recovery = f"{f['recovery_s']:.2f}"
        else:
            recovery = f"> {f.get('recovery_bound_s', data['durations']['after']):g}"
        rows.append([
            name, _n(f["capacity_rps"]), _n(f["offered_rps"]), _n(f["goodput_rps"]),
            f"{frac:.0%}" if frac is not None else "-", _ratio(f["goodput_rps"], h.get("goodput_rps")),
            _n(f["throughput_rps"]), _n(f["response_rps"]), _ms(f["latency_ms"]["p99"]),
            _n(f["rejected"]),
            _n(f["timeouts"] + f["transport_errors"] + f["errors"]), _n(f["capped"]), recovery,
            _ms(f["send_lateness_ms"]["p99"]),
        ])  # fmt: skip
    header = ["system", "capacity req/s", "offered req/s", "goodput req/s", "goodput ÷ capacity",
              "goodput ÷ Headway's", "answered 200/s", "answered (any status)/s", "p99 of 200s ms",
              "rejected (429/503)",
              "errors + timeouts", "queued in client (capped)", "recovery s",
              "send lateness p99 ms"]  # fmt: skip
    return _table(header, rows)


def _profile(data: dict[str, Any]) -> list[str]:
    profile = data.get("profile")
    if not profile:
        return []
    lines = ["## Where the Headway frontend's time goes", ""]
    if "error" in profile:
        return [*lines, f"The profile could not be taken: `{profile['error']}`", ""]
    lines += [
        "py-spy (`record --nonblocking --format raw`) on the `headway serve` process, the "
        "frontend (its worker is a separate process, not sampled), under the overhead load. "
        "Shares are of the samples in which the frontend was on a CPU (py-spy drops idle ones); "
        "time in C (uvloop's socket I/O, httptools, orjson, zmq) counts for the Python frame "
        "that called it. Raw stacks: `bench/.work/<mode>/profile-headway-c*.txt`.",
        "",
    ]
    for key in ("c32", "c1", "overload"):
        p = profile.get(key)
        if not p:
            continue
        if p.get("offered_rps"):
            title = (f"Overload: Poisson at {_n(p['offered_rps'])} req/s (2x capacity): "
                     f"{_n(p['load_rps'])} answers 200/s, {_n(p.get('load_response_rps'))} "
                     f"answers of any status/s, p50 {_ms(p['load_p50_ms'])} ms")  # fmt: skip
        else:
            plural = "s" if p["concurrency"] > 1 else ""
            title = (f"{p['concurrency']} connection{plural}: {_n(p['load_rps'])} req/s, p50 "
                     f"{_ms(p['load_p50_ms'])} ms")  # fmt: skip
        lines += [
            f"### {title}",
            "",
            f"{p['seconds']:g} s at {p['rate']} Hz, {p['samples']:,} on-CPU samples (py-spy saw "
            f"the frontend on a CPU {p['busy']} of the time). From /proc: the frontend used "
            f"{p['load_frontend_cores']} cores = {_n(p['cpu_us_per_request'])} us of CPU per "
            f"answer; its worker {p['load_worker_cores']}; other processes on the machine "
            f"{p['load_other_cores']}.",
            "",
            "Own time by part of the stack:",
            "",
            *_table(["% own", "part"], [[f"{pct:.1f}", n] for n, pct in p["parts"]]),
            "",
            "Top functions by own time:",
            "",
            *_table(["% own", "function (file)"],
                    [[f"{pct:.1f}", f"`{n}`"] for n, pct in p["self"][:15]]),
            "",
            "Top functions by inclusive time (below the event loop's entry points):",
            "",
            *_table(["% incl.", "function (file)"],
                    [[f"{pct:.1f}", f"`{n}`"] for n, pct in p["inclusive"]
                     if not any(e in n for e in ENTRY)][:15]),
            "",
        ]  # fmt: skip
    return lines


def _systems(data: dict[str, Any]) -> list[str]:
    rows = []
    for system in SYSTEMS:
        info = data["systems"].get(system.name)
        if info is None:
            continue
        versions = info.get("versions") or {}
        ver = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "error")
        errors = "; ".join(f"{e['where']}: {e['error']}" for e in info.get("errors", []))
        checks = [f"{k[6:]}: {'ok' if v['ok'] else 'WRONG'} (max err {v['max_abs_error']:.1e})"
                  for k, v in info.items() if k.startswith("check_")]  # fmt: skip
        status = "**failed**: " + errors.replace("|", "/") if errors else "ran"
        starts = ", ".join(f"{k[8:]} {v:g} s" for k, v in info.items() if k.startswith("start_s_"))
        rows.append([system.name, system.label + (f" ({system.note})" if system.note else ""),
                     ver, "; ".join(checks) or "-", starts or "-", status])  # fmt: skip
    return _table(["system", "configuration", "versions", "answers checked", "start time",
                   "status"], rows)  # fmt: skip


def markdown(data: dict[str, Any], raw: Path, previous: str | None = None) -> str:
    m = data["machine"]
    mode = "`--quick` pass" if data["quick"] else "full run"
    lines = [
        "# Headway side by side: results",
        "",
        f"Generated by `python bench/run.py{' --quick' if data['quick'] else ''}` ({mode}) on "
        f"{m['date']}, in {data.get('wall_s', 0):.0f} s wall time ({data.get('calm_waited_s', 0):.0f} s "
        f"of it waiting for a quiet machine, {data.get('retried_s', 0):.0f} s repeating disturbed "
        f"runs). Raw figures: `bench/.work/{raw.name}`.",
        "",
        f"**Machine:** `nproc` = {m['nproc']}, {m['cpu']}, {m['memory']} RAM, Linux {m['kernel']}, "
        f"Python {m['python']}. No GPU. Headway measured: {m.get('headway', '?')} (colleagues "
        f"edit src/ while this runs). The load generator, the server under test and its worker "
        f"processes all share these {m['nproc']} cores. **The machine is shared with colleagues' "
        f"test runs**: load average {', '.join(f'{x:.2f}' for x in m['load_before'])} before and "
        f"{', '.join(f'{x:.2f}' for x in m.get('load_after', ()))} after; the *cores: server / "
        f"others* columns give the CPU the server used and what every process outside this run "
        f"used during each measurement. Compare within a table, as ratios.",
        "",
        "Ratios are each system's figure divided by Headway's from the same run (for throughput "
        "and goodput, above 1x means better than Headway; for latency, below 1x means better).",
        "",
        "## Headway's targets",
        "",
    ]  # fmt: skip
    mark = {True: "met", False: "**missed**", None: "not measured"}
    lines += _table(
        ["target", "result", "measured"],
        [[t["name"], mark[t["met"]], t["detail"]] for t in data["targets"]],
    )
    d = data["durations"]
    if data["results"]["overhead"]:
        lines += [
            "", "## overhead: LogisticRegression, one row per request, closed loop", "",
            f"scikit-learn `LogisticRegression` on `make_classification(n_samples=10_000, "
            f"n_features=20, random_state=0)`; every system computes `predict_proba`. Closed loop "
            f"at 32 connections and at 1, {d['closed']:g} s each after {d['warmup']:g} s warm-up. "
            "`noop` is the same bare Starlette app answering a constant: the HTTP ceiling.", "",
            *_overhead(data),
        ]  # fmt: skip
        drift = data.get("drift")
        if drift:
            runs = []
            for key, label in (("c32", "c=32"), ("c1", "c=1")):
                mine, other = data["results"]["overhead"]["headway"][key], drift[key]
                where = "end" if mine.get("kept") else "start"
                runs.append(
                    f"{label}: kept the {where}-of-run measurement ({_n(mine['throughput_rps'])} "
                    f"req/s, p50 {_ms(mine['latency_ms']['p50'])} ms, others "
                    f"{mine['other_cores']} cores) over the other ({_n(other['throughput_rps'])} "
                    f"req/s, p50 {_ms(other['latency_ms']['p50'])} ms, others "
                    f"{other['other_cores']} cores)"
                )
            lines += ["", "Headway's overhead is measured at the start and again at the end of "
                      "the run; the less disturbed of the two is in the table: "
                      + "; ".join(runs) + "."]  # fmt: skip
    if data["results"]["batching"]:
        lines += [
            "", "## batching: PyTorch MLP, one row per request, 32 connections", "",
            "TorchScript MLP 20 → 512 → 512 → 2 (ReLU, softmax), one thread everywhere; closed "
            f"loop at 32 connections, {d['closed']:g} s. Batching systems batch up to 32 rows, "
            "waiting at most 10 ms; Headway's `max_batch_size` is 64 (batches form from what is "
            "queued while the worker is busy, no added delay). `noop` is the HTTP ceiling.", "",
            *_batching(data),
        ]  # fmt: skip
    if data["results"]["open-loop"]:
        lines += [
            "", f"## open-loop: Poisson arrivals at a share of each system's own capacity, "
            f"{data['slo_ms']:g} ms SLO", "",
            "Capacity = the system's best closed-loop throughput above. Goodput counts 200 "
            "answers within the SLO per second; *attained* = those over all requests sent. "
            f"{d['open']:g} s per level after {d['warmup']:g} s. Latency counts from each "
            "request's scheduled send time. Requests carry `parameters.slo_ms` = 50 (Headway "
            "schedules and sheds by it; the others ignore it).", "",
            *_open_loop(data),
        ]  # fmt: skip
    if data["results"]["overload"]:
        lines += [
            "", f"## overload: 2x capacity for {d['burst']:g} s", "",
            f"Poisson at 50% of capacity for {d['before']:g} s, 200% for {d['burst']:g} s, 50% "
            f"for {d['after']:g} s. Figures over the burst: goodput (200 answers within "
            f"{data['slo_ms']:g} ms, so a system that answers late scores zero for those), p99 of "
            "the 200 answers, rejections. Requests beyond 1024 open connections wait in the client "
            "(*capped*) and their latency still counts from their scheduled time. *Recovery*: "
            "from the end of the burst until every answer to a separate prober (one request "
            f"every 50 ms on its own connection) is a 200 within the SLO; the load generator "
            f"stops {d['after'] + d['drain']:g} s after the burst ({d['after']:g} s of half load, "
            f"then {d['drain']:g} s for the last answers), so '>' means not recovered by then.", "",
            *_overload(data),
        ]  # fmt: skip
    lines += ["", *_profile(data)]
    reading = READING.search(previous or "")
    if reading:
        lines += ["## Reading", "", reading.group(0), ""]
    overhead = OVERHEAD.search(previous or "")
    if overhead:
        lines += [overhead.group(0), ""]
    lines += ["## Systems, versions, and what ran", "", *_systems(data), "", *NOTES]
    return "\n".join(lines).rstrip() + "\n"


NOTES = [
    "## How the comparison is kept fair",
    "",
    "- Same bytes on the wire: every system gets the same Open Inference Protocol JSON bodies at "
    "`POST /v2/models/{model}/infer`, built by `headway.loadgen.workload` and sent by "
    "`headway.loadgen.client.run` (keep-alive HTTP/1.1). One exception: MLServer's scikit-learn "
    "runtime computes `predict_proba` only when the request names that output, so its bodies ask "
    "for `predict_proba` where the others' ask for `probabilities` (the same length).",
    "- Same resources: one HTTP process each. Headway (`--workers 1`), MLServer "
    "(`parallel_workers: 1`), LitServe (one inference worker) and Ray Serve (one replica; plus "
    "its proxy, GCS, raylet and agents) run the model in a second process; Starlette and "
    "BentoML run it in the HTTP process (BentoML's in its thread pool). PyTorch and BLAS use one "
    "thread everywhere. Nothing is pinned to a core.",
    "- Ray runs its workers at nice 15 by default; with the load generator (nice 0) on the same "
    "cores they would lose the CPU to it, so the suite sets `RAY_worker_niceness=0`. Ray's and "
    "BentoML's per-request access logs are off, as no other system writes one.",
    "- MLServer 1.7.1's inference worker fails at start with uvloop 0.23 (`RuntimeError: There "
    "is no current event loop`), so its venv pins uvloop 0.21.0.",
    "- Each system's answers to 10 rows (sent in turn, then all at once so that batchers batch) "
    "are compared with `predict_proba` / the MLP computed in-process before it is timed; a "
    "system with wrong answers is not timed.",
    "- The machine is shared, so before each measurement the suite waits (at most 20 s, 120 s "
    "in all) until other processes use at most 0.25 cores, and repeats a closed- or open-loop "
    "run (up to 3 times, 180 s in all) when others used more than that meanwhile, keeping the "
    "least disturbed run. What others still used is in the *cores: server / others* columns.",
    "- The load generator is one Python process on the same 2 cores (it used 0.2-0.4 of a "
    "core at 8-21k requests/s); every system pays for it alike. Open-loop sends are on "
    "schedule (see *send lateness* for the overload runs, where the client's 1024 connections "
    "fill up and requests wait in the client).",
    "- Reproduce: `python bench/run.py` (everything), `python bench/run.py --quick` (short), "
    "`python bench/overhead.py` (issue 2's subset). Virtual environments are built once into "
    "`bench/.venvs/` from `bench/peers/*/requirements.txt`.",
]


def main() -> None:
    """Re-render a RESULTS file from a run's raw figures (no measuring)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("raw", type=Path, help="bench/.work/results-*.json")
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md"
    )
    args = parser.parse_args()
    data = json.loads(args.raw.read_text())
    if not data.get("settled"):
        settle(data)
        data["settled"] = True
    data["targets"] = targets(data)
    previous = args.output.read_text() if args.output.exists() else None
    args.output.write_text(markdown(data, args.raw, previous))
    for target in data["targets"]:
        print(
            {True: "met", False: "MISSED", None: "n/a"}[target["met"]],
            target["name"],
            target["detail"],
        )


if __name__ == "__main__":
    main()
