"""What both Clockwork experiments share: the machine's description, /metrics, tables."""

from __future__ import annotations

import datetime
import os
import platform
import re
import time
from typing import Any

POLICIES = ("headway", "clipper")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (OSError, ValueError):
        memory = float("nan")
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(memory, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_average_at_start": os.getloadavg(),
    }


def scrape(text: str) -> dict[str, Any]:
    """The scheduler's counters and the summed per-model counters of a /metrics page."""
    out: dict[str, Any] = {}
    for name in ("loads", "evictions", "cold_starts", "refusals", "dropped",
                 "rejected_at_admission"):  # fmt: skip
        # per model (and reason): summed over every series
        found = re.findall(rf"^headway_{name}_total(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
        out[name] = int(sum(float(v) for v in found))
    late = re.findall(r'^headway_late_answers_total\{model="([^"]*)"\} (\S+)$', text, re.MULTILINE)
    out["server_late_answers"] = int(sum(float(v) for _, v in late))
    out["server_late_by_model"] = {m: int(float(v)) for m, v in late if float(v)}
    errors: dict[str, int] = {}
    for reason, value in re.findall(
        r'^headway_errors_total\{model="[^"]*",reason="([^"]+)"\} (\S+)$', text, re.MULTILINE
    ):
        errors[reason] = errors.get(reason, 0) + int(float(value))
    out["server_errors_by_reason"] = errors
    return out


def pct(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
