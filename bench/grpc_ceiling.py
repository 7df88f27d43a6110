"""What grpcio in Python can serve at all on this machine: bare unary echo servers (no
Headway code) loaded by ``h2load`` (``bench/h2load.py``), beside the same closed loop on a
bare REST no-op (an asyncio protocol answering a constant) loaded by ``wrk``.

Each server runs in a child process; the variants are the ways a Python program can serve
gRPC with grpcio: ``grpc.aio`` under asyncio's loop or uvloop, and the synchronous
``grpc.server`` (requests on C-core's threads, handlers on a thread pool), answering in the
thread or handing each call to an event loop in another thread, as an asyncio server must;
and, beside them, Headway's own HTTP/2 path for unary calls (`api.grpc.http2`) on uvloop.

    python bench/grpc_ceiling.py [--duration 5] [--rounds 2] [--only aio-uvloop,rest-noop]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import h2load
import wrk

from headway.launcher import free_port

PATH = "/x.S/M"
MESSAGE = b"x" * 40


def _handler(behaviour: Any) -> grpc.GenericRpcHandler:
    method = grpc.unary_unary_rpc_method_handler(behaviour)
    return grpc.method_handlers_generic_handler("x.S", {"M": method})


def serve_aio(port: int, loop: str) -> None:
    async def echo(request: bytes, context: Any) -> bytes:
        return request

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_handler(echo),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    if loop == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def serve_sync(port: int, threads: int, via_loop: bool) -> None:
    answer = None
    if via_loop:
        import threading

        import uvloop

        loop = uvloop.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()

        async def echo_async(request: bytes) -> bytes:
            return request

        def answer(request: bytes, context: Any) -> bytes:
            return asyncio.run_coroutine_threadsafe(echo_async(request), loop).result()

    def echo(request: bytes, context: Any) -> bytes:
        return request

    server = grpc.server(futures.ThreadPoolExecutor(threads))
    server.add_generic_rpc_handlers((_handler(answer or echo),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def serve_sync_grouped(port: int, threads: int) -> None:
    """Handler threads queue their calls; the loop takes all queued at once (one wake-up)."""
    import threading

    import uvloop

    loop = uvloop.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    queued: list[tuple[bytes, Any]] = []
    lock = threading.Lock()

    def drain() -> None:
        with lock:
            taken = queued[:]
            queued.clear()
        for request, done in taken:
            done.set_result(request)

    def answer(request: bytes, context: Any) -> bytes:
        done: futures.Future[bytes] = futures.Future()
        with lock:
            queued.append((request, done))
            first = len(queued) == 1
        if first:
            loop.call_soon_threadsafe(drain)
        return done.result()

    server = grpc.server(futures.ThreadPoolExecutor(threads))
    server.add_generic_rpc_handlers((_handler(answer),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def serve_rest(port: int) -> None:
    import uvloop

    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"

    class NoOp(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.buffer = b""

        def data_received(self, data: bytes) -> None:
            # one request per read on a keep-alive connection (wrk waits for each answer)
            self.buffer += data
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if not sep:
                return
            length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            if len(rest) >= length:
                self.buffer = rest[length:]
                self.transport.write(answer)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(NoOp, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


def serve_own_http2(port: int) -> None:
    """Headway's own HTTP/2 path (`api.grpc.http2`) on uvloop, answering in the read."""
    import uvloop

    from headway.api.grpc.calls import Call, Limits
    from headway.api.grpc.connections import Connections
    from headway.api.grpc.http2 import Http2Connection

    class Echo:
        def accepts(self, path: str) -> bool:
            return path == PATH

        def call(self, call: Call) -> None:
            call.answer(call.message)

    class Server:
        connections: Connections[Http2Connection] = Connections()
        unanswered = 0
        buffered = 0

        def accept_pending(self) -> None:
            pass

        def arrived_since(self, now: float) -> float:
            return now

        def keep_up(self, now: float) -> None:
            pass

    async def main() -> None:
        echo, server, limits = Echo(), Server(), Limits()
        listener = await asyncio.get_running_loop().create_server(
            lambda: Http2Connection(echo, limits, server), "127.0.0.1", port
        )
        await listener.serve_forever()

    uvloop.run(main())


VARIANTS: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "rest-noop": (serve_rest, ()),
    "own-http2": (serve_own_http2, ()),
    "aio-asyncio": (serve_aio, ("asyncio",)),
    "aio-uvloop": (serve_aio, ("uvloop",)),
    "sync-4-threads": (serve_sync, (4, False)),
    "sync-32-threads": (serve_sync, (32, False)),
    "sync-32-threads-via-loop": (serve_sync, (32, True)),
    "sync-32-threads-grouped-to-loop": (serve_sync_grouped, (32,)),
}


def cpu_seconds(pid: int) -> float:
    """User and system CPU a process (all its threads) has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(name: str, pid: int, port: int, duration: float, lua: Path) -> dict[str, Any]:
    """The closed loop's figures, with the server's CPU per answer (µs) beside them."""
    used, started = cpu_seconds(pid), time.monotonic()
    if name == "rest-noop":
        figures = wrk.closed(f"http://127.0.0.1:{port}/", lua, 32, duration)
    else:
        figures = h2load.closed(
            f"127.0.0.1:{port}", PATH, MESSAGE, connections=32, duration=duration
        )
    cores = (cpu_seconds(pid) - used) / (time.monotonic() - started)
    return {**figures, "cores": cores, "cpu_us": 1e6 * cores / figures["throughput_rps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default=",".join(VARIANTS))
    args = parser.parse_args()
    names = args.only.split(",")
    started = Path("/proc/loadavg").read_text().split()[:3]
    lua = wrk.script(b"{}", Path(tempfile.mkdtemp(prefix="grpc-ceiling-")))
    servers = {}
    for name in names:
        target, extra = VARIANTS[name]
        port = free_port()
        process = multiprocessing.Process(target=target, args=(port, *extra), daemon=True)
        process.start()
        servers[name] = (process, port)
    time.sleep(2.0)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    try:
        for _ in range(args.rounds):
            for name in names:
                process, port = servers[name]
                runs[name].append(measure(name, process.pid, port, args.duration, lua))
    finally:
        for process, _ in servers.values():
            process.terminate()
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average at start {' '.join(started)}", file=sys.stderr)
    print(f"grpcio {grpc.__version__}, python {sys.version.split()[0]}, c=32 "
          f"(32 connections), {args.duration:g} s x {args.rounds}; load average {' '.join(load)}")  # fmt: skip
    print(
        "\n| server | req/s | server cores | server CPU µs per call | p50 ms | p99 ms | failed "
        "| each round |\n|---|---|---|---|---|---|---|---|"
    )
    for name, figures in runs.items():
        rps = statistics.median(r["throughput_rps"] for r in figures)
        p50 = statistics.median(r["latency_ms"]["p50"] for r in figures)
        p99 = statistics.median(r["latency_ms"]["p99"] for r in figures)
        failed = sum(r["requests"] - r["ok"] for r in figures)
        each = " / ".join(f"{r['throughput_rps']:,.0f}" for r in figures)
        cores = statistics.median(r["cores"] for r in figures)
        cpu = statistics.median(r["cpu_us"] for r in figures)
        print(
            f"| {name} | {rps:,.0f} | {cores:.2f} | {cpu:.0f} | {p50:.2f} | {p99:.2f} | "
            f"{failed} | {each} |"
        )


if __name__ == "__main__":
    main()
