"""The local engine: workers as subprocesses, each on its own stream socket to the frontend.

This module starts, watches and restarts the processes, and knows which connection is which
worker; `worker_sockets` moves the bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from headway.control.engine import Action, Engine, OnExit, OnMessage, OnReady, Tensors
from headway.repository import ModelConfig
from headway.runtime import handshake
from headway.runtime.engines.worker_sockets import WorkerLink, WorkerSockets
from headway.runtime.stopping import SIGNAL, StopFile
from headway.runtime.wire import Frames, pack, unpack

log = logging.getLogger("headway.engine")

#: Workers run one action at a time on one core unless a model asks for more threads.
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


class Launched(Protocol):
    """A started worker as an engine watches it: a subprocess here, a Ray actor in the Ray
    engine (`subprocess.Popen` is one as it is)."""

    @property
    def pid(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int | None: ...


@dataclass
class _Process:
    worker: int
    incarnation: int
    process: Launched
    started: float
    ready: bool = False
    connection: WorkerLink[_Process] | None = None


#: Seconds a connection may take to say hello. A worker connects once its imports are done and
#: answers within milliseconds; a connection that stays silent longer is not a worker, and is
#: closed so that strays cannot hold the frontend's sockets.
HELLO_TIMEOUT_S = 10.0


class LocalEngine(Engine):
    """Starts N worker processes and moves frames between them and the controller.

    The frontend listens on `endpoint` (`ipc://PATH`, a Unix socket, by default; `tcp://HOST:PORT`
    for workers elsewhere); each worker connects, and is accepted once it answers the frontend's
    challenge with its identity and proof that it holds this server's secret (`runtime.handshake`):
    anything else that connects is refused, and the worker it claims to be is not disturbed.
    Messages go through `WorkerSockets`. A watcher notices a dead worker (or a lost
    connection) within `watch_interval` seconds, reports it, and starts a replacement (with
    backoff when a worker keeps crashing at start)."""

    kind = "local"

    def __init__(
        self,
        workers: int,
        *,
        endpoint: str | None = None,
        watch_interval: float = 0.2,
        env: dict[str, str] | None = None,
        hello_timeout: float = HELLO_TIMEOUT_S,
    ) -> None:
        if workers < 1:
            raise ValueError("at least one worker is needed")
        self.size = workers
        self._ipc_path: str | None = None
        if endpoint is None:
            self._ipc_path = os.path.join(
                tempfile.gettempdir(), f"headway-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
            )
            endpoint = f"ipc://{self._ipc_path}"
        self.endpoint = endpoint
        self.watch_interval = watch_interval
        self.hello_timeout = hello_timeout
        self._secret = handshake.new_secret()
        self.env = {
            **_WORKER_ENV,
            **os.environ,
            **(env or {}),
            handshake.SECRET_ENV: self._secret,
        }
        self._procs: dict[int, _Process] = {}
        self._incarnations: dict[int, int] = {}
        self._crashes: dict[int, int] = {}
        self._sockets: WorkerSockets[_Process] = WorkerSockets(
            hello=self._hello, deliver=self._deliver, closed=self._closed
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False
        #: workers started by `grow` beyond the `size` the engine started with
        self._grown: set[int] = set()
        #: Each worker process's stop file (`runtime.stopping`), by worker.
        self._stops: dict[int, StopFile] = {}
        self._stop_base = os.path.join(
            tempfile.gettempdir(), f"headway-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        )
        self.on_ready: OnReady = lambda worker, pid: None
        self.on_message: OnMessage = lambda worker, header, tensors: None
        self.on_exit: OnExit = lambda worker, code: None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.endpoint = self._sockets.listen(self._loop, self.endpoint)
        for worker in range(self.size):
            self._spawn(worker)
        self._watcher = asyncio.create_task(self._watch())

    async def stop(self, timeout: float = 3.0) -> None:
        self._stopping = True
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        for proc in self._procs.values():
            self._write(proc, pack({"op": "stop"}))
        deadline = asyncio.get_running_loop().time() + timeout
        for proc in self._procs.values():
            while proc.process.poll() is None and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)
            if proc.process.poll() is None:
                proc.process.kill()
                proc.process.wait()
        self._procs.clear()
        for stops in self._stops.values():
            stops.close()
        self._stops.clear()
        self._sockets.stop()
        if self._ipc_path:
            with contextlib.suppress(OSError):
                os.unlink(self._ipc_path)

    def grow(self, config: ModelConfig) -> int | None:
        """Start one more worker process (any model may use it); its number."""
        worker = max([self.size - 1, *self._procs, *self._grown]) + 1
        self._grown.add(worker)
        self._spawn(worker)
        return worker

    def retire(self, worker: int) -> bool:
        """Stop a worker `grow` started, for good (not restarted); whether it was one."""
        if worker not in self._grown:
            return False
        self._grown.discard(worker)
        stops = self._stops.pop(worker, None)
        if stops is not None:
            stops.close()
        proc = self._procs.pop(worker, None)
        if proc is not None:
            self._write(proc, pack({"op": "stop"}))
            if proc.connection is not None:
                self._sockets.close(proc.connection)
            if proc.process.poll() is None:
                proc.process.kill()
        return True

    def stop_action(self, worker: int, action: int) -> bool:
        """Mark `action` stopped in the worker's stop file and signal the worker."""
        proc, stops = self._procs.get(worker), self._stops.get(worker)
        if proc is None or stops is None or proc.process.pid is None:
            return False
        if proc.process.poll() is not None:
            return False
        stops.mark(action)
        try:
            os.kill(proc.process.pid, SIGNAL)
        except ProcessLookupError:
            return False
        return True

    def pids(self) -> dict[int, int]:
        """The live worker processes, by worker id."""
        return {
            w: p.process.pid
            for w, p in self._procs.items()
            if p.process.pid is not None and p.process.poll() is None
        }

    # -- messages ----------------------------------------------------------------------------
    def send(self, worker: int, action: Action, tensors: Tensors) -> bool:
        """Send one action; False when the worker is not there (the watcher will report it)."""
        proc = self._procs.get(worker)
        if proc is None or not proc.ready:
            return False
        return self._write(proc, pack(action, tensors))

    def _write(self, proc: _Process, frames: Frames) -> bool:
        connection = proc.connection
        if connection is None:
            return False
        return self._sockets.write(connection, frames)

    def catch_up(self) -> None:
        """Read the replies already waiting on the workers' sockets, now, instead of on the
        loop's next turn: for a frontend in the middle of a long turn of reads (`Controller.
        catch_up`)."""
        self._sockets.catch_up()

    def _deliver(self, connection: WorkerLink[_Process], messages: list[list[bytes]]) -> None:
        """Hand a worker's replies to the controller."""
        proc = connection.process
        if proc is None or self._procs.get(proc.worker) is not proc:
            return  # a message from a worker that has since been replaced
        for frames in messages:
            header, tensors = unpack(frames)
            try:
                self.on_message(proc.worker, header, tensors)
            except Exception:  # one bad reply must not lose the others read with it
                log.exception("handling a message from worker %d failed", proc.worker)

    def _hello(self, connection: WorkerLink[_Process], header: dict[str, Any]) -> bool:
        """Bind a new connection to the worker it proves it is; False (closed) otherwise."""
        reason = handshake.refusal(self._secret, connection.challenge, header)
        identity = str(header.get("identity", ""))[:40]
        worker_text, _, incarnation = identity.partition(".")
        proc = self._procs.get(int(worker_text)) if worker_text.isdigit() else None
        if reason is None and (proc is None or str(proc.incarnation) != incarnation):
            reason = f"it says it is worker {identity!r}, which this server is not waiting for"
        elif reason is None and proc is not None and proc.connection is not None:
            reason = f"worker {identity!r} is already connected"
        if reason is not None or proc is None:
            self._sockets.refuse(connection, reason or "unknown worker")
            return False
        connection.process = proc
        proc.connection = connection
        proc.ready = True
        self._crashes[proc.worker] = 0
        self.on_ready(proc.worker, int(header["pid"]))
        return True

    def _closed(self, connection: WorkerLink[_Process]) -> None:
        """A connection closed: a worker's, if it had said hello."""
        proc = connection.process
        if proc is not None and proc.connection is connection:
            proc.connection = None
            proc.ready = False
            if not self._stopping:
                self._disconnected(proc)

    def _disconnected(self, proc: _Process) -> None:
        """A ready worker's connection closed. A process alive but unreachable is restarted
        (no one else may take its place): the watcher sees it exit, reports it and spawns the
        next incarnation."""
        if proc.process.poll() is None:
            log.warning("lost the connection to worker %d; restarting it", proc.worker)
            proc.process.kill()

    # -- processes ---------------------------------------------------------------------------
    def _spawn(self, worker: int) -> None:
        incarnation = self._incarnations.get(worker, 0) + 1
        self._incarnations[worker] = incarnation
        process = self._launch(worker, f"{worker}.{incarnation}")
        assert self._loop is not None
        self._procs[worker] = _Process(worker, incarnation, process, self._loop.time())

    def _launch(self, worker: int, identity: str) -> Launched:
        """Start the process of `worker`, which will say hello as `identity`."""
        stops = self._stops.get(worker)
        if stops is None:
            stops = self._stops[worker] = StopFile(f"{self._stop_base}.w{worker}.stops")
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "headway.runtime.worker",
                "--endpoint",
                self.endpoint,
                "--identity",
                identity,
                "--stops",
                stops.path,
            ],
            env=self.env,
            stdin=subprocess.DEVNULL,
        )

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.watch_interval)
            assert self._loop is not None
            self._sockets.refuse_silent(self._loop.time() - self.hello_timeout, self.hello_timeout)
            for proc in list(self._procs.values()):
                code = proc.process.poll()
                if code is not None:
                    self._exited(proc, code)

    def _exited(self, proc: _Process, code: int | None) -> None:
        """Report a worker gone and start its replacement (backing off while it keeps
        crashing at start)."""
        if self._procs.get(proc.worker) is not proc:
            return  # already reported
        worker = proc.worker
        del self._procs[worker]
        if proc.connection is not None:
            self._sockets.close(proc.connection)
        self.on_exit(worker, code)
        crashes = self._crashes.get(worker, 0) + 1
        self._crashes[worker] = crashes
        delay = 0.0 if crashes <= 1 else min(5.0, 0.25 * 2 ** (crashes - 2))
        assert self._loop is not None
        self._loop.call_later(delay, self._respawn, worker)

    def _respawn(self, worker: int) -> None:
        if not self._stopping and worker not in self._procs:
            self._spawn(worker)
