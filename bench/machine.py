"""What a benchmark ran on: the machine (CPU, memory, load, which Headway commit) and each
system's package versions, for the header of every results file."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from systems import System

PACKAGES = {
    "headway": ["headway", "uvicorn", "uvloop", "httptools", "orjson", "pyzmq"],
    "starlette": ["starlette", "uvicorn", "uvloop", "httptools", "orjson"],
    "noop": ["starlette", "uvicorn", "uvloop", "httptools", "orjson"],
    "ray": ["ray", "starlette", "uvicorn", "fastapi"],
    "litserve": ["litserve", "fastapi", "uvicorn", "pyzmq"],
    "mlserver": ["mlserver", "mlserver-sklearn", "fastapi", "uvicorn", "uvloop"],
    "bentoml": ["bentoml", "starlette", "uvicorn"],
}
COMMON = ["numpy", "scikit-learn", "torch"]


def versions(system: System) -> dict[str, str]:
    names = PACKAGES.get(system.family, []) + COMMON
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([system.python, "-c", code, *names], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    try:
        return dict(json.loads(done.stdout))
    except ValueError:
        return {"error": done.stderr.strip()[-300:]}


def machine() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    root = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(root)]  # read-only: which Headway was measured
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "src"], capture_output=True,
                           text=True).stdout.splitlines()  # fmt: skip
    return {
        "headway": f"commit {commit or '?'}" + (f" + {len(dirty)} uncommitted file(s) in src/"
                                                 if dirty else ""),
        "nproc": nproc, "cpu": model, "memory": mem, "kernel": platform.release(),
        "python": platform.python_version(), "load_before": os.getloadavg(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }  # fmt: skip
