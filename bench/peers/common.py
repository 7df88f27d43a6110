"""What every system under test shares: its virtual environment, its processes, its readiness,
and the check that its answers are right before it is timed.

- ``ensure_venv``: ``bench/.venvs/<name>`` from ``bench/peers/<name>/requirements.txt`` with
  ``python -m venv`` and ``pip install -r``; rebuilt only when the requirements change. With
  ``system_site_packages`` the venv sees this interpreter's packages (torch, ray), so pip
  installs only what they lack.
- ``Server``: a started server and every process it spawns. It is started in a new session and
  its descendants are tracked by PID (with each one's start time, so a reused PID is never
  signalled); ``stop`` asks the leader to stop, then signals every tracked process still alive,
  SIGTERM then SIGKILL. Nothing is ever stopped by name.
- ``check``: the same rows sent one per request, in turn and then all at once (so that a
  batching server batches them), compared with the answers computed in-process.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import orjson

BENCH = Path(__file__).resolve().parents[1]
PEERS = BENCH / "peers"
VENVS = BENCH / ".venvs"
WORK = BENCH / ".work"


class SetupError(Exception):
    """A system could not be installed or started; the message carries the reason (the error)."""


# -- virtual environments ------------------------------------------------------------------------
def venv_python(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def ensure_venv(
    name: str, log: Path, timeout: float = 1800.0, *, system_site_packages: bool = False
) -> Path:
    """The venv's python, creating or rebuilding the venv when its requirements changed."""
    requirements = PEERS / name / "requirements.txt"
    venv = VENVS / name
    python = venv_python(name)
    shared = b"system-site-packages" if system_site_packages else b""
    digest = hashlib.sha256(requirements.read_bytes() + sys.version.encode() + shared).hexdigest()
    stamp = venv / ".requirements.sha256"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        steps = [
            [
                sys.executable,
                "-m",
                "venv",
                str(venv),
                *(["--system-site-packages"] if system_site_packages else []),
            ],
            [str(python), "-m", "pip", "install", "--no-input", "-r", str(requirements)],
        ]
        for step in steps:
            try:
                done = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
            except subprocess.TimeoutExpired:
                raise SetupError(f"`{' '.join(step[-3:])}` took over {timeout:.0f} s") from None
            if done.returncode != 0:
                raise SetupError(f"`{' '.join(step[-3:])}` failed: {error_lines(log)}")
    stamp.write_text(digest)
    return python


def error_lines(log: Path, count: int = 6) -> str:
    """The lines of a log that say what went wrong (errors first, else its tail)."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    lines = [ln for ln in lines if "is ignored: it is neither a file nor a directory" not in ln]
    errors = [ln for ln in lines if "error" in ln.lower()]
    picked = (errors or lines)[-count:]
    return " | ".join(picked)[:1500] or "(empty log)"


# -- processes ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProcStat:
    ppid: int
    sid: int
    start: int  # clock ticks since boot: with the pid, identifies one process for good
    cpu: float  # user + system seconds
    zombie: bool


_TICK = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> ProcStat | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    return ProcStat(
        ppid=int(fields[1]), sid=int(fields[3]), start=int(fields[19]),
        cpu=(int(fields[11]) + int(fields[12])) / _TICK, zombie=fields[0] in "ZX",
    )  # fmt: skip


def all_stats() -> dict[int, ProcStat]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := proc_stat(int(entry))) is not None:
            out[int(entry)] = stat
    return out


#: The environment variable that gives each started server's session (its own autogroup, as
#: it starts in a new session) this nice value (`bench/run.py --autogroup-nice`).
AUTOGROUP_NICE = "HEADWAY_BENCH_AUTOGROUP_NICE"


def set_autogroup_nice(pid: int) -> None:
    """With the kernel's autogroups on, `nice` orders processes only within one session, and
    every session's group gets an equal share of the CPUs: a neighbour's `nice -n 19` jobs in
    their own session take as much as the server under test. Setting the server's group's
    nice (AUTOGROUP_NICE) restores the order the niced jobs asked for."""
    value = os.environ.get(AUTOGROUP_NICE)
    if value:
        try:
            Path(f"/proc/{pid}/autogroup").write_text(value)
        except OSError as exc:
            print(f"note: could not set the autogroup nice of {pid}: {exc}", flush=True)


@dataclass
class Server:
    """A server process started in its own session; it and its descendants are stopped by PID."""

    name: str
    argv: Sequence[str]
    ready_url: str
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    cleanup: tuple[Path, ...] = ()
    process: subprocess.Popen[bytes] | None = None
    tracked: dict[int, int] = field(default_factory=dict)  # pid -> start time

    def start(self, timeout: float = 120.0) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                list(self.argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env}, cwd=self.cwd, start_new_session=True,
            )  # fmt: skip
        set_autogroup_nice(self.process.pid)
        self.refresh()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.refresh()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise SetupError(
                        f"{self.name} exited with {self.process.returncode} before it was "
                        f"ready: {error_lines(self.log)}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.ready_url).status_code == 200:
                        return
                time.sleep(0.2)
        raise SetupError(
            f"{self.name} was not ready within {timeout:.0f} s: {error_lines(self.log)}"
        )

    def refresh(self) -> dict[int, ProcStat]:
        """Track the leader, its session and all its descendants; returns the live ones."""
        if self.process is None:
            return {}
        stats = all_stats()
        leader = stats.get(self.pid)
        if leader is not None:
            self.tracked.setdefault(self.pid, leader.start)
        children: dict[int, list[int]] = {}
        for pid, stat in stats.items():
            children.setdefault(stat.ppid, []).append(pid)
        for pid, stat in stats.items():
            if stat.sid == self.pid:  # our session: everything the leader started and kept
                self.tracked.setdefault(pid, stat.start)
        frontier = [pid for pid in self.tracked if pid in stats]
        while frontier:  # descendants that left the session (setsid), e.g. BentoML's workers
            pid = frontier.pop()
            for child in children.get(pid, []):
                if child not in self.tracked:
                    self.tracked[child] = stats[child].start
                    frontier.append(child)
        return {
            pid: stats[pid]
            for pid, start in self.tracked.items()
            if pid in stats and stats[pid].start == start and not stats[pid].zombie
        }

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU seconds used so far by the leader (the HTTP process) and by all the others."""
        live = self.refresh()
        leader = live[self.pid].cpu if self.pid in live else 0.0
        return leader, sum(stat.cpu for stat in live.values()) - leader

    def alive(self) -> list[int]:
        live = []
        for pid, start in self.tracked.items():
            stat = proc_stat(pid)
            if stat is not None and stat.start == start and not stat.zombie:
                live.append(pid)
        return live

    def _signal(self, pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            stat = proc_stat(pid)
            if stat is not None and stat.start == self.tracked.get(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def _wait_gone(self, seconds: float) -> list[int]:
        deadline = time.monotonic() + seconds
        while True:
            if self.process is not None:
                self.process.poll()  # reap the leader
            live = self.alive()
            if not live or time.monotonic() >= deadline:
                return live
            time.sleep(0.1)

    def stop(self, grace: float = 15.0) -> list[int]:
        """Stop the server and everything it started; returns PIDs that needed SIGKILL."""
        if self.process is None:
            return []
        self.refresh()
        if self.process.poll() is None:
            self._signal([self.pid], signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.process.poll() is None and time.monotonic() < deadline:
                self.refresh()  # a shutting-down server may still spawn helpers
                time.sleep(0.1)
        live = self._wait_gone(0.5)
        if live:
            self._signal(live, signal.SIGTERM)
            live = self._wait_gone(2.0)
        killed = list(live)
        if live:
            self._signal(live, signal.SIGKILL)
            live = self._wait_gone(5.0)
        if self.process.poll() is None:
            self.process.wait(5)
        if live:
            raise SetupError(f"{self.name}: processes {live} survived SIGKILL")
        for folder in self.cleanup:
            shutil.rmtree(folder, ignore_errors=True)
        return killed


# -- correctness ---------------------------------------------------------------------------------
def first_output(answer: dict[str, object]) -> np.ndarray:
    outputs = answer.get("outputs")
    if not isinstance(outputs, list) or not outputs:
        raise ValueError(f"no 'outputs' in the answer: {str(answer)[:200]}")
    item = outputs[0]
    assert isinstance(item, dict)
    return np.asarray(item["data"], dtype=np.float64).reshape(-1)


@dataclass
class Check:
    ok: bool
    max_abs_error: float
    detail: str


def check(
    url: str,
    bodies: Sequence[bytes],
    expected: np.ndarray,
    *,
    atol: float,
    rtol: float = 0.0,
    headers: dict[str, str] | None = None,
) -> Check:
    """POST each body (one row each) in turn, then all at once; compare with ``expected``."""
    expected = np.asarray(expected, dtype=np.float64)
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    worst = 0.0
    problems: list[str] = []
    with httpx.Client(
        trust_env=False, timeout=30.0, limits=httpx.Limits(max_connections=32)
    ) as client:

        def one(i: int) -> np.ndarray:
            response = client.post(url, content=bodies[i], headers=hdrs)
            if response.status_code != 200:
                raise ValueError(f"row {i}: HTTP {response.status_code}: {response.text[:200]}")
            return first_output(orjson.loads(response.content))

        runs: list[tuple[str, Callable[[], list[np.ndarray]]]] = [
            ("in turn", lambda: [one(i) for i in range(len(bodies))]),
        ]
        pool = concurrent.futures.ThreadPoolExecutor(len(bodies))
        runs.append(("at once", lambda: list(pool.map(one, range(len(bodies))))))
        try:
            for how, run in runs:
                try:
                    answers = run()
                except (ValueError, KeyError, TypeError, httpx.HTTPError) as exc:
                    problems.append(f"{how}: {exc}")
                    continue
                for i, got in enumerate(answers):
                    want = expected[i].reshape(-1)
                    if got.shape != want.shape:
                        problems.append(f"{how}: row {i}: {got.size} values, expected {want.size}")
                        continue
                    error = float(np.max(np.abs(got - want)))
                    worst = max(worst, error)
                    if not np.allclose(got, want, atol=atol, rtol=rtol):
                        problems.append(f"{how}: row {i}: max |error| {error:.3g} > {atol:g}")
        finally:
            pool.shutdown()
    detail = "; ".join(problems[:3]) if problems else f"{2 * len(bodies)} answers match"
    return Check(not problems, worst, detail)
