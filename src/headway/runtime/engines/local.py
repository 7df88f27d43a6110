"""The local engine: workers as subprocesses behind one ZeroMQ ROUTER socket.

The frontend's event loop owns the socket (edge-triggered: every readable event drains it).
A watcher notices a dead worker within `watch_interval` seconds, reports it, and starts a
replacement (with backoff when a worker keeps crashing at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from headway.runtime.wire import Frames, pack, unpack, zero_copy

OnReady = Callable[[int, int], None]
OnMessage = Callable[[int, dict[str, Any], dict[str, np.ndarray]], None]
OnExit = Callable[[int, int | None], None]

#: Workers run one action at a time on one core unless a model asks for more threads.
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


@dataclass
class _Process:
    worker: int
    incarnation: int
    process: subprocess.Popen[bytes]
    started: float
    ready: bool = False


class LocalEngine:
    """Starts N worker processes and moves frames between them and the controller."""

    kind = "local"

    def __init__(
        self,
        workers: int,
        *,
        endpoint: str | None = None,
        watch_interval: float = 0.2,
        env: dict[str, str] | None = None,
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
        self.env = {**_WORKER_ENV, **os.environ, **(env or {})}
        self._procs: dict[int, _Process] = {}
        self._incarnations: dict[int, int] = {}
        self._crashes: dict[int, int] = {}
        self._context = zmq.Context.instance()
        self._socket: zmq.Socket[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._drain_scheduled = False
        self._stopping = False
        self.on_ready: OnReady = lambda worker, pid: None
        self.on_message: OnMessage = lambda worker, header, tensors: None
        self.on_exit: OnExit = lambda worker, code: None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        socket = self._context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        socket.bind(self.endpoint)
        if self.endpoint.startswith("tcp://") and self.endpoint.endswith(":0"):
            self.endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._socket = socket
        self._loop.add_reader(socket.getsockopt(zmq.FD), self._drain)
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
            self._send_identity(proc, pack({"op": "stop"}))
        deadline = asyncio.get_running_loop().time() + timeout
        for proc in self._procs.values():
            while proc.process.poll() is None and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)
            if proc.process.poll() is None:
                proc.process.kill()
                proc.process.wait()
        self._procs.clear()
        if self._socket is not None and self._loop is not None:
            self._loop.remove_reader(self._socket.getsockopt(zmq.FD))
            self._socket.close(0)
            self._socket = None
        if self._ipc_path:
            with contextlib.suppress(OSError):
                os.unlink(self._ipc_path)

    def pids(self) -> dict[int, int]:
        """The live worker processes, by worker id."""
        return {w: p.process.pid for w, p in self._procs.items() if p.process.poll() is None}

    # -- messages ----------------------------------------------------------------------------
    def send(self, worker: int, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> bool:
        """Send one action; False when the worker is not there (the watcher will report it)."""
        proc = self._procs.get(worker)
        if proc is None or not proc.ready:
            return False
        return self._send_identity(proc, pack(header, tensors))

    def _send_identity(self, proc: _Process, frames: Frames) -> bool:
        assert self._socket is not None
        identity = f"{proc.worker}.{proc.incarnation}".encode()
        try:
            self._socket.send_multipart([identity, *frames], copy=not zero_copy(frames))
        except zmq.ZMQError:
            return False
        if not self._drain_scheduled and self._loop is not None:
            # Edge-triggered FD: a send may consume the readable edge; look again soon.
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)
        return True

    def _drain(self) -> None:
        self._drain_scheduled = False
        socket = self._socket
        if socket is None:
            return
        while socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            frames = socket.recv_multipart(zmq.NOBLOCK)
            identity = frames[0].decode()
            worker_text, _, incarnation = identity.partition(".")
            proc = self._procs.get(int(worker_text))
            if proc is None or proc.incarnation != int(incarnation):
                continue  # a message from a worker that has since been replaced
            header, tensors = unpack(frames[1:])
            if header.get("op") == "hello":
                proc.ready = True
                self._crashes[proc.worker] = 0
                self.on_ready(proc.worker, int(header["pid"]))
            else:
                self.on_message(proc.worker, header, tensors)

    # -- processes ---------------------------------------------------------------------------
    def _spawn(self, worker: int) -> None:
        incarnation = self._incarnations.get(worker, 0) + 1
        self._incarnations[worker] = incarnation
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "headway.runtime.worker",
                "--endpoint",
                self.endpoint,
                "--identity",
                f"{worker}.{incarnation}",
            ],
            env=self.env,
            stdin=subprocess.DEVNULL,
        )
        assert self._loop is not None
        self._procs[worker] = _Process(worker, incarnation, process, self._loop.time())

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.watch_interval)
            for worker, proc in list(self._procs.items()):
                code = proc.process.poll()
                if code is None:
                    continue
                del self._procs[worker]
                self.on_exit(worker, code)
                crashes = self._crashes.get(worker, 0) + 1
                self._crashes[worker] = crashes
                delay = 0.0 if crashes <= 1 else min(5.0, 0.25 * 2 ** (crashes - 2))
                assert self._loop is not None
                self._loop.call_later(delay, self._respawn, worker)

    def _respawn(self, worker: int) -> None:
        if not self._stopping and worker not in self._procs:
            self._spawn(worker)
