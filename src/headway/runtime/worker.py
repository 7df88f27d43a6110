"""A worker process: hosts models and executes one action at a time, timing each.

Started by an engine as `python -m headway.runtime.worker --endpoint ENDPOINT --identity ID`,
with the server's secret in `HEADWAY_WORKER_SECRET`; it serves `load`, `infer` and `unload`
actions (`WorkerState`) and exits when its parent goes away, so a crashed server leaves no
orphans.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import resource
import socket
import struct
import sys
import time
import traceback
from typing import Any

from headway.adapters import Adapter, adapter_class
from headway.control.engine import Action, Answer, Emit, Reply, Tensors
from headway.runtime import handshake
from headway.runtime.stopping import ActionStopped, StopMarks
from headway.runtime.threads import set_threads
from headway.runtime.wire import READ_SIZE, FrameReader, connect, pack, send_all, unpack


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: peak RSS is the best we have
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: Frameworks (comma-separated) a worker imports when it starts, before it says hello: a
#: framework's first import takes seconds, which in a LOAD would block the worker's requests
#: and land in that model's LOAD estimate.
FRAMEWORKS_ENV = "HEADWAY_WORKER_FRAMEWORKS"
#: What loading a framework's models imports beyond its adapter (unpickling imports these).
_MODEL_IMPORTS = {"sklearn": ("sklearn.ensemble", "sklearn.linear_model", "sklearn.tree")}


def prepare(frameworks: str) -> list[str]:
    """Import the adapters of `frameworks` (and the frameworks themselves), then freeze every
    object made so far out of the collector's way (they live as long as the process). Returns
    the frameworks that could not be imported: their LOADs fail with the adapter's clear error."""
    missing: list[str] = []
    for name in filter(None, (part.strip() for part in frameworks.split(","))):
        try:
            adapter_class(name)
            for module in _MODEL_IMPORTS.get(name, ()):
                importlib.import_module(module)
        except Exception:
            missing.append(name)
    gc.collect()
    gc.freeze()
    return missing


#: Microseconds a worker busy-polls for its next action after finishing one, while actions
#: come at least this close together; set by `headway serve --busy-poll-us` (with the
#: frontend's own polling, `api/busy_poll.py`). Off by default: it costs up to that much CPU
#: per action (docs/decisions.md).
SPIN_ENV = "HEADWAY_WORKER_SPIN_US"
DEFAULT_SPIN_US = "0"


class Held:
    """A generative model's sequence held on this worker: its state, parts made, and cap."""

    __slots__ = ("cap", "made", "state")

    def __init__(self, state: Any, cap: int) -> None:
        self.state = state
        self.made = 0
        self.cap = cap


class WorkerState:
    """The models this worker hosts and the actions it knows. No sockets here."""

    OPERATIONS = frozenset({"load", "infer", "step", "unload", "ping"})

    def __init__(self) -> None:
        self.models: dict[str, Adapter] = {}
        #: Each generative model's sequences held here, by the controller's numbers.
        self.sequences: dict[str, dict[int, Held]] = {}
        #: The threads each model computes with (its `threads` option; 1 by default).
        self.threads: dict[str, int] = {}
        #: What the native thread pools are set to now (`runtime.threads`): one, as the engine
        #: starts the worker; 0 when unknown (a LOAD may have loaded a library since).
        self.pools = 1
        #: Where the frontend marks the actions it stops (None: it stops none).
        self.stops: StopMarks | None = None

    def handle(self, action: Action, tensors: Tensors, emit: Emit | None = None) -> Answer:
        """Run one action and return its reply. A streaming model's INFER sends each part
        of its answer through `emit` as it is made, before the reply that ends it."""
        op = action.get("op")
        latest = action.get("latest")
        if latest is not None and time.monotonic() > latest:
            # Clockwork's window: an action that can no longer start in time is refused, so
            # the controller can answer its requests at once instead of running them late.
            # The last guard: every refusal before this is admission's (control/admission),
            # which cannot see how late the action reached this worker.
            return {"id": action.get("id"), "ok": False, "late": True, "duration": 0.0}, {}
        started = time.perf_counter()
        reply: Reply
        try:
            if op == "infer":
                reply, outputs = self._infer(action, tensors, emit)
            elif op in self.OPERATIONS:
                reply, outputs = getattr(self, f"_{op}")(action, tensors)
            else:
                raise ValueError(f"unknown op {op!r}; a worker knows {sorted(self.OPERATIONS)}")
        except ActionStopped as exc:  # the frontend's stop: its CPU time travels as a field
            error = f"{type(exc).__name__}: {exc}"
            reply = {"id": None, "ok": False, "error": error, "stopped": True, "cpu_s": exc.cpu_s}
            outputs = {}
        except Exception as exc:  # the model's failure is reported, never fatal to the worker
            reply, outputs = {"id": None, "ok": False, "error": f"{type(exc).__name__}: {exc}"}, {}
            if os.environ.get("HEADWAY_WORKER_TRACEBACKS"):
                traceback.print_exc()
        reply["id"] = action.get("id")
        reply["duration"] = time.perf_counter() - started
        return reply, outputs

    def _load(self, action: Action, _: Tensors) -> Answer:
        config = action["config"]
        if config is None:
            raise ValueError("a LOAD needs the model's config")
        evict = action.get("evict")
        for key in evict or ():
            self.models.pop(key, None)
            self.sequences.pop(key, None)
            self.threads.pop(key, None)
        if evict:
            # Young generation only: a full collection takes longer than a tight SLO on every
            # evicting LOAD (docs/decisions.md).
            gc.collect(0)
        before = _rss_mb()
        adapter = adapter_class(config["framework"])(config)
        adapter.load()
        self.models[action["model"]] = adapter
        self.threads[action["model"]] = max(1, int(adapter.options.get("threads", 1)))
        if self.pools != 1:  # a library it loaded sized its pool from the environment's one
            self.pools = 0
        inputs, outputs = adapter.signature()
        memory = max(0.0, _rss_mb() - before)
        reply: Reply = {
            "id": None,
            "ok": True,
            "inputs": inputs,
            "outputs": outputs,
            "memory_mb": memory,
        }
        if adapter.streams:
            reply["streams"] = True
        return reply, {}

    def _unload(self, action: Action, _: Tensors) -> Answer:
        self.models.pop(action["model"], None)
        self.sequences.pop(action["model"], None)
        self.threads.pop(action["model"], None)
        gc.collect(0)  # as for an evicting LOAD: a full collection takes too long here
        return {"id": None, "ok": True}, {}

    def _infer(self, action: Action, tensors: Tensors, emit: Emit | None) -> Answer:
        adapter = self.models.get(action["model"])
        if adapter is None:
            raise LookupError(f"model {action['model']!r} is not loaded on this worker")
        threads = self.threads[action["model"]]
        if threads != self.pools:
            set_threads(threads)
            self.pools = threads
        if adapter.streams:
            return self._stream(adapter, action, tensors, emit)
        stops = self.stops
        if stops is None:
            outputs = adapter.predict(tensors, action.get("outputs"))
        else:
            try:  # the handler clears `running` itself when it stops the action
                stops.begin(action["id"])  # ActionStopped: stopped before it started
                outputs = adapter.predict(tensors, action.get("outputs"))
            finally:
                stops.end()
        _check_rows(outputs, action["rows"])
        return {"id": None, "ok": True}, outputs

    def _stream(
        self, adapter: Adapter, action: Action, tensors: Tensors, emit: Emit | None
    ) -> Answer:
        """A streaming model's batch: each part sent as it is made, then a reply that ends
        it (no outputs: they all went as parts). An error after some parts ends it there."""
        if emit is None:
            raise RuntimeError("this worker cannot send a streaming model's parts")
        started = time.perf_counter()
        rows, first, parts = action["rows"], 0.0, 0
        number = action.get("id")
        for outputs in adapter.stream(tensors, action.get("outputs")):
            _check_rows(outputs, rows)
            if not parts:
                first = time.perf_counter() - started
            parts += 1
            emit({"id": number, "ok": True, "part": True}, outputs)
        return {"id": None, "ok": True, "parts": parts, "first": first}, {}

    def _step(self, action: Action, tensors: Tensors) -> Answer:
        """One step of a generative model: stop the sequences named, start the new ones (each
        a row of the tensors), then advance every sequence named to run by one part. A
        sequence that cannot start fails alone; a step that raises fails every sequence it
        ran, and their states are released."""
        model = action["model"]
        adapter = self.models.get(model)
        if adapter is None:
            raise LookupError(f"model {model!r} is not loaded on this worker")
        if not adapter.generative:
            raise TypeError(f"model {model!r} is not generative: it takes infer, not step")
        held = self.sequences.setdefault(model, {})
        for number in action.get("stop") or ():
            gone = held.pop(number, None)
            if gone is not None:
                adapter.stop(gone.state)
        bound = int((adapter.config.get("generative") or {}).get("max_sequences", 0)) or None
        failed: list[list[Any]] = []
        for row, (number, parameters, cap) in enumerate(action.get("start") or ()):
            if bound is not None and len(held) >= bound:
                failed.append([number, f"the worker holds its {bound} sequences (max_sequences)"])
                continue
            inputs = {name: array[row : row + 1] for name, array in tensors.items()}
            try:
                held[number] = Held(adapter.start(inputs, dict(parameters or {})), int(cap))
            except Exception as exc:
                failed.append([number, f"{type(exc).__name__}: {exc}"])
        order = [number for number in action.get("run") or () if number in held]
        if not order:
            return {"id": None, "ok": True, "order": [], "finished": [], "failed": failed}, {}
        try:
            outputs, finished = adapter.step([held[number].state for number in order])
            _check_rows(outputs, len(order))
            if len(finished) != len(order):
                raise ValueError(
                    f"step returned {len(finished)} finished flags for {len(order)} sequences"
                )
        except Exception:
            for number in order:
                with contextlib.suppress(Exception):  # the step's error is the one to report
                    adapter.stop(held.pop(number).state)
            raise
        ended = []
        for number, done in zip(order, finished, strict=True):
            sequence = held[number]
            sequence.made += 1
            if done or sequence.made >= sequence.cap:
                ended.append(number)
                adapter.stop(held.pop(number).state)
        return {
            "id": None,
            "ok": True,
            "order": order,
            "finished": ended,
            "failed": failed,
        }, outputs

    def _ping(self, action: Action, _: Tensors) -> Answer:
        reply: Reply = {"id": None, "ok": True, "pid": os.getpid(), "models": sorted(self.models)}
        reply["threads"] = self.pools
        return reply, {}


def _check_rows(outputs: Tensors, rows: int) -> None:
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != rows:
            raise ValueError(
                f"output {name!r} has shape {list(array.shape)}; its first dimension must be "
                f"the batch ({rows} rows)"
            )


def serve(endpoint: str, identity: str, secret: str, stops: str | None = None) -> None:
    """Connect to the controller, prove it holds the server's `secret` (`runtime.handshake`),
    and execute actions until told to stop or orphaned; `stops`: the file where the frontend
    marks the actions it stops (`runtime.stopping`)."""
    parent = os.getppid()
    # Imports first: once connected, the frontend gives a worker only moments to say hello.
    prepare(os.environ.get(FRAMEWORKS_ENV, ""))
    sock = connect(endpoint)
    # A blocking recv that gives up after a second (to look for the parent): no poll() call
    # before each recv, so an action costs the worker one wake-up and one read.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 1, 0))
    reader = FrameReader()
    first = _first_message(sock, reader, parent)
    if first is None or first.get("op") != "challenge":
        return  # the frontend is gone, or is not one
    send_all(sock, pack(handshake.hello(secret, first, identity, os.getpid())))
    state = WorkerState()
    if stops is not None:
        state.stops = StopMarks(stops)
        state.stops.install()

    def emit(reply: Reply, outputs: Tensors) -> None:
        send_all(sock, pack(reply, outputs))

    spin = float(os.environ.get(SPIN_ENV, DEFAULT_SPIN_US)) / 1e6
    idle_since, gap = 0.0, float("inf")
    while True:
        # Busy-poll only while actions come closer together than `spin`: the next one then
        # likely arrives within it and pays no wake-up. A worker left idle spins at most once.
        data = _poll(sock, spin) if gap < spin else None
        if data is None:
            try:
                data = sock.recv(READ_SIZE)
            except (BlockingIOError, InterruptedError):
                if os.getppid() != parent:
                    return
                gap = float("inf")
                continue
        if not data:
            return  # the frontend is gone
        gap = time.perf_counter() - idle_since
        for frames in reader.feed(data):
            header, tensors = unpack(frames)
            if header.get("op") == "stop":
                return
            reply, outputs = state.handle(header, tensors, emit)
            send_all(sock, pack(reply, outputs))
        idle_since = time.perf_counter()


def _first_message(sock: socket.socket, reader: FrameReader, parent: int) -> dict[str, Any] | None:
    """The frontend's first message (its challenge); None if it went away first."""
    while True:
        try:
            data = sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            if os.getppid() != parent:
                return None
            continue
        if not data:
            return None
        messages = reader.feed(data)
        if messages:  # nothing follows it until the hello is accepted
            first: dict[str, Any] = unpack(messages[0])[0]
            return first


def _poll(sock: socket.socket, seconds: float) -> bytes | None:
    """What arrives on `sock` within `seconds`, found by polling without sleeping; None if
    nothing did. Yields the core between polls, so a runnable neighbour is not held up."""
    end = time.perf_counter() + seconds
    while True:
        try:
            return sock.recv(READ_SIZE, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            if time.perf_counter() >= end:
                return None
            os.sched_yield()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A Headway worker process.")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--stops", default=None, help="the frontend's stop file for this worker")
    args = parser.parse_args(argv)
    # Not on the command line (`ps` shows it to every user), and not left in the environment
    # for the processes a model may start.
    secret = os.environ.pop(handshake.SECRET_ENV, "")
    with contextlib.suppress(KeyboardInterrupt):
        serve(args.endpoint, args.identity, secret, args.stops)
    sys.exit(0)


if __name__ == "__main__":
    main()
