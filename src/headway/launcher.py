"""Start `headway serve` as a child process and wait until it is ready.

Used by the demo, the benchmarks and the integration tests, so that each talks to a real
server over loopback exactly as a user's client would.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: What the server prints once it listens (`cli.serve`): its URL.
ANNOUNCED = re.compile(rb"headway: serving .* on (https?://\S+) ")
#: What it prints when the gRPC port was taken after it was picked.
GRPC_PORT_TAKEN = b"cannot listen for gRPC"
#: Starts tried before giving up on ports taken under the launcher's feet.
START_ATTEMPTS = 3
#: Lines of the log that a failure to start quotes.
LOG_TAIL_LINES = 40


class ServerProcess:
    """A `headway serve` child on 127.0.0.1; a context manager that stops it by its PID.

    `url` (and `port`) are known once `start` returned, unless `port` was given. Ports are never
    guessed for HTTP: unless told one, the server binds port 0 and the launcher reads the URL it
    announces. A free port picked for gRPC can be taken by another process before the server binds
    it; the server then fails at once, and the launcher starts it again on another. Whatever the
    server writes goes to a log file (a temporary one unless given), and a server that exits while
    starting raises with the end of that log in the message."""

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
        ca: Path | None = None,
    ) -> None:
        self.port = port or 0
        #: `ca`: the server serves TLS (`--tls-cert`), signed by this authority, which the
        #: launcher trusts when it asks the server whether it is ready.
        self.verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else True
        self.url = f"{'https' if ca else 'http'}://127.0.0.1:{self.port}" if port else ""
        #: gRPC on a free port of its own (never the fixed 8001: servers run side by side);
        #: pass 0 to serve none.
        self._pick_grpc = grpc_port is None
        self.grpc_port = free_port() if grpc_port is None else grpc_port
        self._arguments = [
            "--repository", str(repository), "--workers", str(workers), "--state", str(state),
            *(extra or []),
        ]  # fmt: skip
        if log is None:
            handle, name = tempfile.mkstemp(prefix="headway-serve-", suffix=".log")
            os.close(handle)
            log = Path(name)
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "headway.cli.main", "serve", "--port", str(self.port),
            "--grpc-port", str(self.grpc_port), *self._arguments,
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> ServerProcess:
        """Start the server and wait until it is ready (or raise, quoting its log)."""
        deadline = time.monotonic() + timeout
        for attempt in range(1, START_ATTEMPTS + 1):
            offset = self.log.stat().st_size if self.log.exists() else 0
            with open(self.log, "ab") as out:
                self.process = subprocess.Popen(
                    self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env
                )
            try:
                return self._wait_ready(offset, deadline)
            except _Exited as exited:
                retry = self._pick_grpc and GRPC_PORT_TAKEN in exited.output
                if not retry or attempt == START_ATTEMPTS:
                    raise RuntimeError(
                        f"headway serve exited with {exited.code}; the end of its log "
                        f"({self.log}):\n{_tail(exited.output)}"
                    ) from None
                self.grpc_port = free_port()
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_ready(self, offset: int, deadline: float) -> ServerProcess:
        assert self.process is not None
        announced = bool(self.url)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise _Exited(self.process.returncode, self._output(offset))
            if not announced:
                found = ANNOUNCED.search(self._output(offset))
                if found:
                    self.url = found.group(1).decode()
                    self.port = int(self.url.rsplit(":", 1)[1])
                    announced = True
            if announced:
                try:
                    ready = httpx.get(
                        f"{self.url}/v2/health/ready", timeout=1.0, verify=self.verify
                    )
                    if _started(ready):
                        return self
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(
            f"headway serve was not ready in time; the end of its log ({self.log}):\n"
            + _tail(self._output(offset))
        )

    def _output(self, offset: int) -> bytes:
        """What the server wrote to the log since this start."""
        with open(self.log, "rb") as log:
            log.seek(offset)
            return log.read()

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


class _Exited(Exception):
    def __init__(self, code: int, output: bytes) -> None:
        super().__init__(code)
        self.code = code
        self.output = output


def _tail(output: bytes) -> str:
    lines = output.decode(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(lines) or "(empty)"
