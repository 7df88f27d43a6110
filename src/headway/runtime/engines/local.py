"""The local engine: workers as subprocesses, each on its own stream socket to the frontend.

Plain sockets and not ZeroMQ, which hands every message through an I/O thread on each side:
four thread wake-ups per hop instead of one (docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from headway.control.engine import Action, Engine, OnExit, OnMessage, OnReady, Tensors
from headway.repository import ModelConfig
from headway.runtime import handshake
from headway.runtime.wire import (
    READ_SIZE,
    FrameReader,
    Frames,
    framed,
    listen,
    pack,
    remainder,
    unpack,
)

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
    connection: _Connection | None = None


class _Connection:
    """One worker's socket: what has been read of its next message, what waits to be written."""

    __slots__ = ("challenge", "fd", "opened", "peer", "pending", "process", "reader", "sock")

    def __init__(self, sock: socket.socket, peer: str, opened: float) -> None:
        self.sock = sock
        self.opened = opened
        self.fd = sock.fileno()
        self.peer = peer
        self.reader = FrameReader()
        self.pending: list[memoryview] = []  # unsent bytes, while the socket's buffer is full
        self.process: _Process | None = None  # known once the worker said hello
        self.challenge = handshake.challenge()


#: The most a connection may send before its hello is accepted (a hello is ~200 bytes).
_HELLO_LIMIT = 1 << 14
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
    Messages are `wire.framed`: a gathered `sendmsg` out, one `recv` in, read by the event loop's
    own reader callback. A watcher notices a dead worker (or a lost connection) within
    `watch_interval` seconds, reports it, and starts a replacement (with backoff when a worker
    keeps crashing at start)."""

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
        self._listener: socket.socket | None = None
        self._connections: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False
        #: workers started by `grow` beyond the `size` the engine started with
        self._grown: set[int] = set()
        self.on_ready: OnReady = lambda worker, pid: None
        self.on_message: OnMessage = lambda worker, header, tensors: None
        self.on_exit: OnExit = lambda worker, code: None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        listener = listen(self.endpoint)
        if self.endpoint.startswith("tcp://") and self.endpoint.endswith(":0"):
            host = self.endpoint[len("tcp://") :].rpartition(":")[0]
            self.endpoint = f"tcp://{host}:{listener.getsockname()[1]}"
        self._listener = listener
        self._loop.add_reader(listener.fileno(), self._accept)
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
        for connection in list(self._connections):
            self._close(connection)
        if self._listener is not None and self._loop is not None:
            self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
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
        proc = self._procs.pop(worker, None)
        if proc is not None:
            self._write(proc, pack({"op": "stop"}))
            if proc.connection is not None:
                self._close(proc.connection)
            if proc.process.poll() is None:
                proc.process.kill()
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
        return self._write_to(connection, frames)

    def _write_to(self, connection: _Connection, frames: Frames) -> bool:
        """Write now, as far as the socket takes it; the rest when it is writable again."""
        buffers, total = framed(frames)
        if connection.pending:  # keep the order: behind what is already waiting
            connection.pending += remainder(buffers, 0)
            return True
        try:
            sent = connection.sock.sendmsg(buffers)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(connection)
            return False
        if sent < total:
            connection.pending = remainder(buffers, sent)
            assert self._loop is not None
            self._loop.add_writer(connection.fd, self._flush, connection)
        return True

    def _flush(self, connection: _Connection) -> None:
        while connection.pending:
            try:
                sent = connection.sock.sendmsg(connection.pending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close(connection)
                return
            connection.pending = remainder(connection.pending, sent)
        assert self._loop is not None
        self._loop.remove_writer(connection.fd)

    def _accept(self) -> None:
        assert self._listener is not None and self._loop is not None
        while True:
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                log.exception("accepting a worker connection failed")
                return
            sock.setblocking(False)
            peer = "a local process"
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                peer = f"{address[0]}:{address[1]}"
            connection = _Connection(sock, peer, self._loop.time())
            self._connections.add(connection)
            self._loop.add_reader(connection.fd, self._readable, connection)
            self._write_to(connection, pack(dict(connection.challenge)))

    def catch_up(self) -> None:
        """Read the replies already waiting on the workers' sockets, now, instead of on the
        loop's next turn: for a frontend in the middle of a long turn of reads (`Controller.
        catch_up`)."""
        for connection in list(self._connections):
            if connection.process is not None:
                self._readable(connection)

    def _readable(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the worker went away: the watcher reports the exit
            self._close(connection)
            return
        if connection.process is None:
            self._greet(connection, data)
        else:
            self._deliver(connection, connection.reader.feed(data))

    def _deliver(self, connection: _Connection, messages: list[list[bytes]]) -> None:
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

    def _greet(self, connection: _Connection, data: bytes) -> None:
        """What a connection sends before it is a worker: its hello, then (rarely, in the same
        read) the first replies. A stray that sends too much or garbage is closed."""
        try:
            messages = connection.reader.feed(data)
            if not messages:
                if connection.reader.buffered > _HELLO_LIMIT:
                    self._refuse(connection, "it sent more than a hello before saying hello")
                return
            header, _ = unpack(messages[0])
        except Exception as exc:  # a stray's bytes must never take the engine down
            self._refuse(connection, f"its first message is not a message: {exc!r:.200}")
            return
        if self._hello(connection, header) and len(messages) > 1:
            self._deliver(connection, messages[1:])

    def _hello(self, connection: _Connection, header: dict[str, Any]) -> bool:
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
            self._refuse(connection, reason or "unknown worker")
            return False
        connection.process = proc
        proc.connection = connection
        proc.ready = True
        self._crashes[proc.worker] = 0
        self.on_ready(proc.worker, int(header["pid"]))
        return True

    def _refuse(self, connection: _Connection, reason: str) -> None:
        log.warning("refused a worker connection from %s: %s", connection.peer, reason)
        self._close(connection)

    def _close(self, connection: _Connection) -> None:
        if connection not in self._connections:
            return
        self._connections.discard(connection)
        if self._loop is not None:
            self._loop.remove_reader(connection.fd)
            self._loop.remove_writer(connection.fd)
        connection.sock.close()
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
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "headway.runtime.worker",
                "--endpoint",
                self.endpoint,
                "--identity",
                identity,
            ],
            env=self.env,
            stdin=subprocess.DEVNULL,
        )

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.watch_interval)
            assert self._loop is not None
            silent_since = self._loop.time() - self.hello_timeout
            for connection in list(self._connections):
                if connection.process is None and connection.opened < silent_since:
                    self._refuse(connection, f"no hello within {self.hello_timeout:g} s")
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
            self._close(proc.connection)
        self.on_exit(worker, code)
        crashes = self._crashes.get(worker, 0) + 1
        self._crashes[worker] = crashes
        delay = 0.0 if crashes <= 1 else min(5.0, 0.25 * 2 ** (crashes - 2))
        assert self._loop is not None
        self._loop.call_later(delay, self._respawn, worker)

    def _respawn(self, worker: int) -> None:
        if not self._stopping and worker not in self._procs:
            self._spawn(worker)
