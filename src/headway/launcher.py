"""Start `headway serve` as a child process and wait until it is ready.

Used by the demo, the benchmarks and the integration tests, so that each talks to a real
server over loopback exactly as a user's client would.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A `headway serve` child on 127.0.0.1; a context manager that stops it by its PID."""

    def __init__(
        self,
        repository: Path,
        *,
        state: Path,
        workers: int = 1,
        port: int | None = None,
        grpc_port: int | None = None,
        extra: list[str] | None = None,
        log: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        #: gRPC on a free port of its own (never the fixed 8001: servers run side by side);
        #: pass 0 to serve none.
        self.grpc_port = free_port() if grpc_port is None else grpc_port
        self.grpc_address = f"127.0.0.1:{self.grpc_port}"
        self.command = [
            sys.executable, "-m", "headway.cli.main", "serve",
            "--repository", str(repository), "--port", str(self.port),
            "--grpc-port", str(self.grpc_port),
            "--workers", str(workers), "--state", str(state), *(extra or []),
        ]  # fmt: skip
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ServerProcess:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"headway serve exited with {self.process.returncode}"
                    + (f"; see {self.log}" if self.log else "")
                )
            try:
                if _started(httpx.get(f"{self.url}/v2/health/ready", timeout=1.0)):
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"headway serve was not ready within {timeout:.0f} s")

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def _started(ready: httpx.Response) -> bool:
    """Whether the server finished starting: every model ready, or a 503 that names models it
    could not serve once starting was over (a repository with a broken model still serves the
    others; the caller asks `/v2/health/ready` if it needs them all)."""
    if ready.status_code == 200:
        return True
    if ready.status_code != 503:
        return False
    try:
        return ready.json().get("starting") is False
    except ValueError:
        return False
