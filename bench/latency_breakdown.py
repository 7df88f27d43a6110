"""Where one request's time goes below the HTTP layer, stage by stage, on an idle server.

Serves ``overhead``'s model (the LogisticRegression of ``bench/models.py``, ``predict_proba`` of
one row of 20 features) from a real Controller and one real worker process, and sends requests
one at a time in-process, as ``api/app.py`` does after it has read the body: OIP decode ->
``Controller.infer`` -> encode. No HTTP: what this measures is what Headway adds between the
decoded request and the encoded answer.

Timestamps are ``time.perf_counter_ns`` (CLOCK_MONOTONIC on Linux: one clock for both
processes), taken by wrappers around the functions of each stage, in the frontend and in the
worker (which this script starts itself, patched, as ``latency_breakdown.py --worker``); the
worker's stamps ride back in its reply header. Each stage's median and p90 over ``--requests``
requests, after a warm-up, and the same for the inline path (decode -> ``predict_proba`` ->
encode in one process, what the bare inline app does below HTTP). CPU seconds per request of
both processes are reported too (a busy-polling worker would show there).

    python bench/latency_breakdown.py [--requests 3000] [--warmup 300] [--gap-ms 0.5]

Compare two trees with ``PYTHONPATH=/other/src``. Experiments, not Headway's code:
``--memo-estimates`` (the scheduler's batch-size search without recomputed percentiles) and
``BREAKDOWN_SPIN_US=N`` (the worker busy-polls N us before a blocking recv; the worker's own
``HEADWAY_WORKER_SPIN_US`` does the same for a real server).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ns = time.perf_counter_ns
#: The frontend's stamps of the request in flight (one at a time).
STAMPS: dict[str, int] = {}


# -- the worker side -----------------------------------------------------------------------------
def worker_main(endpoint: str, identity: str) -> None:
    """The real `serve` loop, with stamps at wake-up, unpack, predict and pack."""
    from headway.runtime import worker as w

    try:
        import zmq
    except ImportError:
        zmq = None

    marks: dict[str, int] = {}
    recv, unpack, pack, infer = (
        zmq.Socket.recv_multipart,
        w.unpack,
        w.pack,
        w.WorkerState._infer,
    )

    def recv_multipart(self: Any, *args: Any, **kwargs: Any) -> Any:
        frames = recv(self, *args, **kwargs)
        marks["w_recvd"] = ns()
        return frames

    def unpack_(frames: Any) -> Any:
        out = unpack(frames)
        marks["w_unpacked"] = ns()
        return out

    def infer_(self: Any, header: Any, tensors: Any) -> Any:
        marks["w_predict_start"] = ns()
        out = infer(self, header, tensors)
        marks["w_predict_end"] = ns()
        return out

    def pack_(header: dict[str, Any], tensors: Any = None) -> Any:
        if header.get("id") is not None and "w_predict_end" in marks:
            marks["w_handled"] = ns()
            header["stamps"] = dict(marks)
            marks.clear()
        return pack(header, tensors)

    spin_ns = int(float(os.environ.get("BREAKDOWN_SPIN_US", "0")) * 1000)
    if spin_ns and hasattr(w, "connect"):  # experiment: busy-poll before a blocking recv
        import socket

        class Spinning(socket.socket):
            def recv(self, size: int, flags: int = 0) -> bytes:
                end = ns() + spin_ns
                while ns() < end:
                    try:
                        return super().recv(size, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        pass
                return super().recv(size)

        connect = w.connect

        def spinning_connect(endpoint: str) -> socket.socket:
            sock = connect(endpoint)
            return Spinning(sock.family, sock.type, fileno=sock.detach())

        w.connect = spinning_connect
    if hasattr(w, "FrameReader"):  # the stream transport: a reader is fed each recv's bytes

        class Reader(w.FrameReader):  # type: ignore[misc, name-defined]
            def feed(self, data: bytes) -> Any:
                marks["w_recvd"] = ns()
                return super().feed(data)

        w.FrameReader = Reader
    else:
        zmq.Socket.recv_multipart = recv_multipart  # type: ignore[method-assign]
    w.unpack, w.pack, w.WorkerState._infer = unpack_, pack_, infer_  # type: ignore[assignment]
    from headway.runtime import handshake

    w.serve(endpoint, identity, os.environ.pop(handshake.SECRET_ENV, ""))


# -- the frontend side ---------------------------------------------------------------------------
async def frontend(args: argparse.Namespace) -> dict[str, Any]:
    import models
    import numpy as np
    from harness import bodies
    from systems import headway_repository

    from headway.api import oip
    from headway.control.controller import Controller
    from headway.control.request import InferenceRequest
    from headway.repository import Repository
    from headway.runtime.engines import local

    class Engine(local.LocalEngine):
        def _spawn(self, worker: int) -> None:
            incarnation = self._incarnations.get(worker, 0) + 1
            self._incarnations[worker] = incarnation
            import subprocess

            process = subprocess.Popen(
                [sys.executable, __file__, "--worker", self.endpoint, f"{worker}.{incarnation}"],
                env=self.env,
                stdin=subprocess.DEVNULL,
            )
            assert self._loop is not None
            self._procs[worker] = local._Process(worker, incarnation, process, self._loop.time())

        def __init__(self, workers: int) -> None:
            super().__init__(workers)
            readable = self._sockets.readable

            def readable_(link: Any) -> None:  # the worker sockets' reader callback
                STAMPS["f_drain"] = ns()
                readable(link)

            self._sockets.readable = readable_  # type: ignore[method-assign]

    unpack, pack = local.unpack, local.pack

    def unpack_(frames: Any) -> Any:
        STAMPS["f_recvd"] = ns()
        out = unpack(frames)
        STAMPS["f_unpacked"] = ns()
        return out

    def pack_(header: dict[str, Any], tensors: Any = None) -> Any:
        STAMPS["f_pack_start"] = ns()
        out = pack(header, tensors)
        STAMPS["f_packed"] = ns()
        return out

    local.unpack, local.pack = unpack_, pack_  # type: ignore[assignment]

    paths = models.ensure()
    x, _ = models.dataset()
    payloads = bodies(x[100:116], "FP64", "probabilities")
    work = Path(tempfile.mkdtemp(prefix="headway-breakdown-"))
    repository = Repository.scan(headway_repository("lr", paths, work))
    engine = Engine(1)
    controller = Controller(repository, engine)
    await controller.start()
    sched = controller.scheduler
    if args.memo_estimates:
        _memo_estimates(sched.estimator)
    submit, pump, send, on_message = (
        sched.submit,
        controller.relay._pump,
        engine.send,
        engine.on_message,
    )
    poll, complete = sched.poll, sched.complete

    def complete_(*args: Any) -> Any:
        STAMPS["f_complete"] = ns()
        dispatch = complete(*args)
        STAMPS["f_completed"] = ns()
        return dispatch

    def poll_() -> Any:
        decisions = poll()
        STAMPS["f_polled"] = ns()
        return decisions

    def submit_(request: Any) -> None:
        STAMPS["f_submit"] = ns()
        submit(request)
        STAMPS["f_submitted"] = ns()

    def pump_() -> None:
        STAMPS["f_pump"] = ns()
        pump()

    def send_(worker: int, header: dict[str, Any], tensors: Any) -> bool:
        STAMPS["f_send"] = ns()
        ok = send(worker, header, tensors)
        STAMPS["f_sent"] = ns()
        return ok

    def on_message_(worker: int, header: dict[str, Any], tensors: Any) -> None:
        STAMPS["f_on_reply"] = ns()
        STAMPS.update({k: v for k, v in header.get("stamps", {}).items()})
        on_message(worker, header, tensors)
        STAMPS["f_replied"] = ns()

    sched.submit = submit_  # type: ignore[method-assign]
    sched.poll = poll_  # type: ignore[method-assign]
    sched.complete = complete_  # type: ignore[method-assign]
    controller.relay._pump = pump_  # type: ignore[method-assign]
    engine.send = send_  # type: ignore[method-assign]
    engine.on_message = on_message_

    # the inline path, as the bare app runs it below HTTP
    import joblib

    model = joblib.load(paths.lr)

    rows: list[dict[str, int]] = []
    inline: list[int] = []
    answers_match = True
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    child0 = _proc_cpu(next(iter(engine.pids().values())))
    t_start = ns()
    for i in range(args.warmup + args.requests):
        body = payloads[i % len(payloads)]
        STAMPS.clear()
        t0 = ns()
        request = oip.decode_infer(body)
        t1 = ns()
        prediction = await controller.infer(
            InferenceRequest("lr", inputs=request.inputs, outputs=request.outputs)
        )
        t2 = ns()
        oip.encode_infer(prediction.model, prediction.version, prediction.outputs, request)
        t3 = ns()
        if i >= args.warmup:
            rows.append({**STAMPS, "t0": t0, "t1": t1, "t2": t2, "t3": t3})
        if i < len(payloads):
            want = model.predict_proba(request.inputs["input-0"])
            answers_match &= bool(np.array_equal(prediction.outputs["probabilities"], want))
        await asyncio.sleep(args.gap_ms / 1e3)  # an idle gap, as between a client's requests
    wall = (ns() - t_start) / 1e9
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    child1 = _proc_cpu(next(iter(engine.pids().values())))
    await controller.stop()
    total = args.warmup + args.requests
    front_cpu = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / total
    worker_cpu = (child1 - child0) / total

    for i in range(args.warmup + args.requests):
        body = payloads[i % len(payloads)]
        t0 = ns()
        request = oip.decode_infer(body)
        probabilities = model.predict_proba(request.inputs["input-0"])
        oip.encode_infer("lr", 1, {"probabilities": probabilities}, request)
        if i >= args.warmup:
            inline.append(ns() - t0)
    return {
        "rows": rows,
        "inline": inline,
        "front_cpu_us": front_cpu * 1e6,
        "worker_cpu_us": worker_cpu * 1e6,
        "wall_s": wall,
        "answers_match": answers_match,
    }


def _memo_estimates(estimator: Any) -> None:
    """An experiment, not Headway's code: estimates above the largest measured batch size
    derived from that size's cached estimate (the same values) instead of recomputing its
    percentile for every size that the batch-size search asks about."""
    estimate = estimator.estimate

    def memo(model: str, batch_size: int) -> float | None:
        cache = estimator._cache.get(model)
        if cache is not None and batch_size in cache:
            return cache[batch_size]  # type: ignore[no-any-return]
        largest = estimator.largest_measured(model)
        if largest and batch_size > largest:
            base = memo(model, largest)
            if base is None:
                return None
            value = base * batch_size / largest
            estimator._cache.setdefault(model, {})[batch_size] = value
            return value
        return estimate(model, batch_size)  # type: ignore[no-any-return]

    estimator.estimate = memo


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


STAGES = [
    ("OIP decode (api/oip.py)", "t0", "t1"),
    ("infer: lookup, validate, Request, future", "t1", "f_submit"),
    ("scheduler.submit", "f_submit", "f_submitted"),
    ("submit -> pump runs (call_soon)", "f_submitted", "f_pump"),
    ("pump: scheduler.poll", "f_pump", "f_polled"),
    ("pump: _send builds the header", "f_polled", "f_send"),
    ("engine.send: wire.pack", "f_pack_start", "f_packed"),
    ("engine.send: socket send", "f_packed", "f_sent"),
    ("frontend send -> worker recv (IPC + wake)", "f_sent", "w_recvd"),
    ("worker: unpack", "w_recvd", "w_unpacked"),
    ("worker: handle -> _infer", "w_unpacked", "w_predict_start"),
    ("worker: adapter predict + checks", "w_predict_start", "w_predict_end"),
    ("worker: handle returns", "w_predict_end", "w_handled"),
    ("worker pack+send -> frontend drain (IPC + wake)", "w_handled", "f_drain"),
    ("frontend: drain -> recv'd", "f_drain", "f_recvd"),
    ("frontend: wire.unpack", "f_recvd", "f_unpacked"),
    ("frontend: -> _on_reply", "f_unpacked", "f_on_reply"),
    ("_on_reply -> scheduler.complete", "f_on_reply", "f_complete"),
    ("scheduler.complete", "f_complete", "f_completed"),
    ("_answer: split rows, set_result; _kick", "f_completed", "f_replied"),
    ("set_result -> infer returns (resume)", "f_replied", "t2"),
    ("OIP encode", "t2", "t3"),
]


def report(data: dict[str, Any]) -> str:
    rows = data["rows"]
    lines = [
        f"{'stage':<50} {'p50 us':>8} {'p90 us':>8}",
        "-" * 68,
    ]
    for label, a, b in STAGES:
        values = [r[b] - r[a] for r in rows if a in r and b in r]
        if not values:
            lines.append(f"{label:<50} {'-':>8} {'-':>8}")
            continue
        q = statistics.quantiles(values, n=10)
        lines.append(f"{label:<50} {statistics.median(values) / 1e3:8.1f} {q[8] / 1e3:8.1f}")
    total = [r["t3"] - r["t0"] for r in rows]
    inline = data["inline"]
    lines += [
        "-" * 68,
        f"{'Headway below HTTP: decode -> encode':<50} "
        f"{statistics.median(total) / 1e3:8.1f} {statistics.quantiles(total, n=10)[8] / 1e3:8.1f}",
        f"{'inline: decode -> predict_proba -> encode':<50} "
        f"{statistics.median(inline) / 1e3:8.1f} "
        f"{statistics.quantiles(inline, n=10)[8] / 1e3:8.1f}",
        f"CPU per request: frontend {data['front_cpu_us']:.0f} us, worker "
        f"{data['worker_cpu_us']:.0f} us (incl. the idle gaps; {data['wall_s']:.1f} s wall)",
        f"answers identical to predict_proba in-process: {data['answers_match']}",
    ]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=0.5, help="idle time between requests")
    parser.add_argument(
        "--memo-estimates",
        action="store_true",
        help="experiment: derive unmeasured batch sizes' estimates from one cached percentile",
    )
    args = parser.parse_args()
    import uvloop

    data = uvloop.run(frontend(args))
    print(f"load average {os.getloadavg()[0]:.2f}; {args.requests} requests, one at a time")
    print(report(data))


if __name__ == "__main__":
    main()
