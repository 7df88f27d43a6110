"""The cost of HTTP/2 framing per unary gRPC call: the `h2` library beside Headway's own
(`api.grpc.http2`), in one process, on the same bytes.

    PYTHONPATH=src python bench/http2_framing.py [--calls 20000] [--rounds 3]

Each side is fed what a gRPC client sends for one call (HEADERS whose block references the
HPACK table, as after a client's first call; DATA with a 64-byte message; a connection
WINDOW_UPDATE crediting the answer) and answers it (HEADERS, DATA, trailers), with no app
behind it. Prints µs of CPU per call for each, median over rounds, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import h2.config
import h2.connection
import h2.events
import hpack

from headway.api.grpc import frames as f
from headway.api.grpc.calls import Call, Limits
from headway.api.grpc.connections import Connections
from headway.api.grpc.http2 import Http2Connection

HEADERS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"127.0.0.1:8001"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
    (b"user-agent", b"grpc-c/1.0"),
]
MESSAGE = b"\x00\x00\x00\x00\x40" + b"x" * 64


def requests(count: int) -> list[bytes]:
    encoder = hpack.Encoder()
    credit = f.window_update(0, 256)
    return [
        f.frame(f.HEADERS, f.END_HEADERS, 2 * i + 1, encoder.encode(HEADERS))
        + f.frame(f.DATA, f.END_STREAM, 2 * i + 1, MESSAGE)
        + credit
        for i in range(count)
    ]


def with_h2(calls: list[bytes]) -> float:
    config = h2.config.H2Configuration(client_side=False, header_encoding=None)
    server = h2.connection.H2Connection(config)
    server.initiate_connection()
    server.receive_data(f.PREFACE + f.settings({}))
    server.data_to_send()
    started = time.process_time()
    for data in calls:
        for event in server.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                stream = event.stream_id
                server.send_headers(
                    stream, [(b":status", b"200"), (b"content-type", b"application/grpc")]
                )
                server.send_data(stream, MESSAGE)
                server.send_headers(stream, [(b"grpc-status", b"0")], end_stream=True)
        server.data_to_send()
    return time.process_time() - started


class _Sink:
    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def get_extra_info(self, name: str) -> None:
        return None


class _Server:
    def __init__(self) -> None:
        self.connections: Connections[Http2Connection] = Connections()
        self.unanswered = 0
        self.buffered = 0

    def accept_pending(self) -> None:
        pass

    def arrived_since(self, now: float) -> float:
        return now

    def keep_up(self, now: float) -> None:
        pass


class _Echo:
    def accepts(self, path: str) -> bool:
        return True

    def call(self, call: Call) -> None:
        call.answer(call.message)


def with_own(calls: list[bytes]) -> float:
    connection = Http2Connection(_Echo(), Limits(), _Server())
    connection.connection_made(_Sink())  # type: ignore[arg-type]
    connection.data_received(f.PREFACE + f.settings({}))
    started = time.process_time()
    for data in calls:
        connection.data_received(data)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    calls = requests(args.calls)
    costs: dict[str, list[float]] = {"h2": [], "own": []}
    for _ in range(args.rounds):  # interleaved
        costs["h2"].append(with_h2(calls) / args.calls * 1e6)
        costs["own"].append(with_own(calls) / args.calls * 1e6)
    h2_us, own_us = statistics.median(costs["h2"]), statistics.median(costs["own"])
    print("| framing | CPU µs per call (median) | rounds |")
    print("|---|---|---|")
    print(f"| h2 {h2.__version__} | {h2_us:.1f} | {', '.join(f'{c:.1f}' for c in costs['h2'])} |")
    print(
        f"| own (api.grpc.http2) | {own_us:.1f} | {', '.join(f'{c:.1f}' for c in costs['own'])} |"
    )
    print(f"\nown / h2 = {own_us / h2_us:.3f}")


if __name__ == "__main__":
    main()
