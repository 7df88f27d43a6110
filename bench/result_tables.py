"""The tables of ``RESULTS.md``, one per workload, from a suite run's figures: every figure
also as a ratio to Headway's; the frontend's profile; the systems, versions and checks."""

from __future__ import annotations

from typing import Any

from systems import SYSTEMS
from targets import get, throughput

#: The profile's section heading in RESULTS.md.
PROFILE_HEADING = "## Where the Headway frontend's time goes"
#: Frames every stack starts with (process entry, CLI, server start): not where time goes.
ENTRY = ("click/", "runpy", "headway/cli/", "uvicorn/server.py", "uvicorn/_compat.py",
         "asyncio/runners.py")  # fmt: skip


def fmt_number(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def fmt_ms(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


def fmt_ratio(value: Any, reference: Any) -> str:
    if not value or not reference:
        return "-"
    return f"{value / reference:.2f}x"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def systems_in(data: dict[str, Any], scenario: str) -> list[str]:
    return [s.name for s in SYSTEMS if s.name in data["results"][scenario]]


def overhead_table(data: dict[str, Any]) -> list[str]:
    res = data["results"]["overhead"]
    h = res.get("headway", {})
    h32, h1 = h.get("c32", {}), h.get("c1", {})
    rows = []
    for name in systems_in(data, "overhead"):
        c32, c1 = res[name]["c32"], res[name]["c1"]
        rows.append([
            name, fmt_number(c32["throughput_rps"]), fmt_ratio(c32["throughput_rps"], h32.get("throughput_rps")),
            fmt_ms(c32["latency_ms"]["p50"]), fmt_ms(c32["latency_ms"]["p99"]),
            fmt_number(c1["throughput_rps"]), fmt_ms(c1["latency_ms"]["p50"]),
            fmt_ratio(c1["latency_ms"]["p50"], get(h1, "latency_ms", "p50")),
            fmt_ms(c1["latency_ms"]["p99"]), fmt_ratio(c1["latency_ms"]["p99"], get(h1, "latency_ms", "p99")),
            str(c32["requests"] - c32["ok"]), f"{c32['server_cores']} / {c32['other_cores']}",
        ])  # fmt: skip
    header = ["system", "c=32 req/s", "÷ Headway", "c=32 p50 ms", "c=32 p99 ms", "c=1 req/s",
              "c=1 p50 ms", "÷ Headway", "c=1 p99 ms", "÷ Headway", "c=32 not 200",
              "c=32 cores: server / others"]  # fmt: skip
    return md_table(header, rows)


def batching_table(data: dict[str, Any]) -> list[str]:
    res = data["results"]["batching"]
    href = throughput(res.get("headway"))
    rows = []
    for name in systems_in(data, "batching"):
        f = res[name]
        rows.append(
            [
                name,
                fmt_number(f["throughput_rps"]),
                fmt_ratio(f["throughput_rps"], href),
                fmt_ms(f["latency_ms"]["p50"]),
                fmt_ms(f["latency_ms"]["p99"]),
                str(f["requests"] - f["ok"]),
                f"{f['server_cores']} / {f['other_cores']}",
            ]
        )
    lines = md_table(["system", "rows/s (= req/s)", "÷ Headway", "p50 ms", "p99 ms", "not 200",
                    "cores: server / others"], rows)  # fmt: skip
    limit = data.get("inprocess")
    if limit:
        sizes = ", ".join(f"{k.split('@')[1]}: {v:,.0f}" for k, v in limit.items() if "@" in k)
        ceiling = throughput(res.get("noop"))
        lines += ["", f"In-process limit (TorchScript MLP, {limit['threads']} thread, no serving): "
                  f"**{limit['rows_per_s']:,.0f} rows/s** at batch {limit['best_batch']} "
                  f"(rows/s by batch size: {sizes})."]  # fmt: skip
        if href:
            lines.append(f"Headway served {href:,.0f} rows/s = **{href / limit['rows_per_s']:.0%} "
                         f"of the in-process limit**"
                         + (f" and {href / ceiling:.0%} of the HTTP ceiling (no-op app, "
                            f"{ceiling:,.0f} req/s)." if ceiling else "."))  # fmt: skip
    return lines


def open_loop_table(data: dict[str, Any]) -> list[str]:
    res = data["results"]["open-loop"]
    levels = [f"{x:g}" for x in data["durations"]["levels"]]
    h = res.get("headway", {})
    header = ["system", "capacity req/s"]
    for level in levels:
        pct = f"{float(level):.0%}"
        header += [f"{pct}: goodput req/s", "÷ Headway", "attained", "p99 ms"]
    rows = []
    for name in systems_in(data, "open-loop"):
        row = [name, fmt_number(res[name]["capacity_rps"])]
        for level in levels:
            f = res[name].get(level)
            if not f:
                row += ["-"] * 4
                continue
            row += [fmt_number(f["goodput_rps"]), fmt_ratio(f["goodput_rps"], get(h, level, "goodput_rps")),
                    f"{f['slo_attainment']:.1%}" if f["slo_attainment"] is not None else "-",
                    fmt_ms(f["latency_ms"]["p99"])]  # fmt: skip
        rows.append(row)
    return md_table(header, rows)


def overload_table(data: dict[str, Any]) -> list[str]:
    res = data["results"]["overload"]
    h = res.get("headway", {})
    rows = []
    for name in systems_in(data, "overload"):
        f = res[name]
        frac = (f["goodput_rps"] or 0) / f["capacity_rps"] if f.get("capacity_rps") else None
        if f.get("recovered"):
            recovery = f"{f['recovery_s']:.2f}"
        else:
            recovery = f"> {f.get('recovery_bound_s', data['durations']['after']):g}"
        rows.append([
            name, fmt_number(f["capacity_rps"]), fmt_number(f["offered_rps"]), fmt_number(f["goodput_rps"]),
            f"{frac:.0%}" if frac is not None else "-", fmt_ratio(f["goodput_rps"], h.get("goodput_rps")),
            fmt_number(f["throughput_rps"]), fmt_number(f["response_rps"]), fmt_ms(f["latency_ms"]["p99"]),
            fmt_number(f["rejected"]),
            fmt_number(f["timeouts"] + f["transport_errors"] + f["errors"]), fmt_number(f["capped"]), recovery,
            fmt_ms(f["send_lateness_ms"]["p99"]),
            f"{f['server_cores']} / {f['loadgen_cores']} / {f['other_cores']}",
        ])  # fmt: skip
    header = ["system", "capacity req/s", "offered req/s", "goodput req/s", "goodput ÷ capacity",
              "goodput ÷ Headway's", "answered 200/s", "answered (any status)/s", "p99 of 200s ms",
              "rejected (429/503)",
              "errors + timeouts", "queued in client (capped)", "recovery s",
              "send lateness p99 ms", "cores: server / load generator / others"]  # fmt: skip
    lines = md_table(header, rows)
    caps = []
    for name in systems_in(data, "overload"):
        c = res[name].get("capacity_run")
        if c:
            caps.append([name, fmt_number(c["throughput_rps"]), fmt_ms(c["latency_ms"]["p50"]),
                         fmt_ms(c["latency_ms"]["p99"]), str(c["requests"] - c["ok"]),
                         f"{c['server_cores']} / {c['other_cores']}"])  # fmt: skip
    if caps:
        lines += ["", f"Capacity on the wide MLP (closed loop, 32 connections, {data['durations']['closed']:g} s):", "",
                  *md_table(["system", "req/s", "p50 ms", "p99 ms", "not 200",
                           "cores: server / others"], caps)]  # fmt: skip
    return lines + overload_sweep_table(data)


def overload_sweep_table(data: dict[str, Any]) -> list[str]:
    """One row per system and offered multiple of its capacity (`--overload-multiples`)."""
    rows = []
    for name in systems_in(data, "overload"):
        for multiple, f in data["results"]["overload"][name].get("sweep", {}).items():
            frac = (f["goodput_rps"] or 0) / f["capacity_rps"] if f.get("capacity_rps") else None
            answered = f.get("rejection_latency_ms") or {}
            rows.append([
                name, f"{multiple}x", fmt_number(f["offered_rps"]), fmt_number(f["goodput_rps"]),
                f"{frac:.0%}" if frac is not None else "-", fmt_ms(f["latency_ms"]["p99"]),
                fmt_number(f["rejected"]), fmt_ms(answered.get("p50")), fmt_ms(answered.get("p99")),
                fmt_number(f["timeouts"] + f["transport_errors"] + f["errors"]),
                fmt_ms(f["send_lateness_ms"]["p99"]),
                " / ".join(f"{v:g}" for v in f.get("loadavg", [])) or "-",
            ])  # fmt: skip
    if not rows:
        return []
    header = ["system", "offered", "offered req/s", "goodput req/s", "goodput ÷ capacity",
              "p99 of 200s ms", "rejected", "503 answered p50 ms", "503 answered p99 ms",
              "errors + timeouts", "send lateness p99 ms", "load average after"]  # fmt: skip
    return ["", "Offered loads from a share to a multiple of capacity (`--overload-multiples`):",
            "", *md_table(header, rows)]  # fmt: skip


def profile_section(data: dict[str, Any]) -> list[str]:
    profile = data.get("profile")
    if not profile:
        return []
    lines = [PROFILE_HEADING, ""]
    if "error" in profile:
        return [*lines, f"The profile could not be taken: `{profile['error']}`", ""]
    lines += [
        "py-spy (`record --nonblocking --format raw`) on the `headway serve` process, the "
        "frontend (its worker is a separate process, not sampled), under the overhead load "
        "(LR, closed loop) and, when the overload target was missed, under the overload "
        "scenario's load (the wide MLP, Poisson at 2x Headway's capacity on it). "
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
            title = (f"Overload ({'wide MLP' if p.get('model') == 'wide' else 'LR'}): Poisson at "
                     f"{fmt_number(p['offered_rps'])} req/s (2x capacity): "
                     f"{fmt_number(p['load_rps'])} answers 200/s, {fmt_number(p.get('load_response_rps'))} "
                     f"answers of any status/s, p50 {fmt_ms(p['load_p50_ms'])} ms")  # fmt: skip
        else:
            plural = "s" if p["concurrency"] > 1 else ""
            title = (f"{p['concurrency']} connection{plural}: {fmt_number(p['load_rps'])} req/s, p50 "
                     f"{fmt_ms(p['load_p50_ms'])} ms")  # fmt: skip
        lines += [
            f"### {title}",
            "",
            f"{p['seconds']:g} s at {p['rate']} Hz, {p['samples']:,} on-CPU samples (py-spy saw "
            f"the frontend on a CPU {p['busy']} of the time). From /proc: the frontend used "
            f"{p['load_frontend_cores']} cores = {fmt_number(p['cpu_us_per_request'])} us of CPU per "
            f"answer; its worker {p['load_worker_cores']}; other processes on the machine "
            f"{p['load_other_cores']}.",
            "",
            "Own time by part of the stack:",
            "",
            *md_table(["% own", "part"], [[f"{pct:.1f}", n] for n, pct in p["parts"]]),
            "",
            "Top functions by own time:",
            "",
            *md_table(["% own", "function (file)"],
                    [[f"{pct:.1f}", f"`{n}`"] for n, pct in p["self"][:15]]),
            "",
            "Top functions by inclusive time (below the event loop's entry points):",
            "",
            *md_table(["% incl.", "function (file)"],
                    [[f"{pct:.1f}", f"`{n}`"] for n, pct in p["inclusive"]
                     if not any(e in n for e in ENTRY)][:15]),
            "",
        ]  # fmt: skip
    return lines


def systems_table(data: dict[str, Any]) -> list[str]:
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
    return md_table(["system", "configuration", "versions", "answers checked", "start time",
                   "status"], rows)  # fmt: skip
