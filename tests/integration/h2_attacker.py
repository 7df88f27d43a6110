"""An HTTP/2 client on a raw socket that sends what it likes, byte by byte, and a real
`tritonclient.grpc` client calling beside it (`test_grpc_http2_attacks`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import hpack
import numpy as np
import tritonclient.grpc as triton_grpc
from tritonclient.grpc import service_pb2

from headway.api.grpc import frames as f

T = TypeVar("T")

PATH = b"/inference.GRPCInferenceService/ModelInfer"
HEADERS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", PATH),
    (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]
#: Seconds a legitimate call beside an attack may take (its deadline).
DEADLINE_S = 5.0


def infer_message(rows: np.ndarray) -> bytes:
    """A ModelInfer request for model `doubler` as a gRPC message (its 5-byte prefix too)."""
    request = service_pb2.ModelInferRequest(model_name="doubler")
    request.inputs.add(name="input-0", datatype="FP32", shape=list(rows.shape))
    request.raw_input_contents.append(rows.astype(np.float32).tobytes())  # as tritonclient
    body = request.SerializeToString()
    return b"\x00" + len(body).to_bytes(4, "big") + body


class Attacker:
    """One connection: the preface and SETTINGS sent, then whatever the test sends; what the
    server writes is read by a thread (unless `read` is false) until the connection ends."""

    def __init__(
        self,
        address: str,
        own: dict[int, int] | None = None,
        read: bool = True,
        receive_buffer: int = 0,
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(10)
        self.sock.connect((host, int(port)))
        self.encoder = hpack.Encoder()
        self.received = bytearray()
        self.ended = threading.Event()
        self.send(f.PREFACE + f.settings(own or {}))
        if read:
            self.start_reading()

    def start_reading(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        self.sock.settimeout(None)
        try:
            while chunk := self.sock.recv(1 << 16):
                self.received += chunk
        except OSError:
            pass  # reset: what came before it is kept
        self.ended.set()

    def send(self, data: bytes) -> bool:
        """False once the server has closed the connection."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def flood(self, pieces: Iterable[bytes]) -> int:
        """Send each piece until the server closes; how many went."""
        sent = 0
        for piece in pieces:
            if self.ended.is_set() or not self.send(piece):
                break
            sent += 1
        return sent

    def head(self, stream: int, end_headers: bool = True) -> bytes:
        flags = f.END_HEADERS if end_headers else 0
        return f.frame(f.HEADERS, flags, stream, self.encoder.encode(HEADERS))

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        data, out, at = bytes(self.received), [], 0
        while len(data) - at >= 9:
            length, kind, flags, stream = f.frame_head(data, at)
            out.append((kind, flags, stream, data[at + 9 : at + 9 + length]))
            at += 9 + length
        return out

    def goaway(self, timeout: float = 10.0) -> tuple[int, bytes]:
        """The code and message of the GOAWAY the server ended the connection with."""
        assert self.ended.wait(timeout), "the server did not end the connection"
        goaways = [p for kind, _, _, p in self.frames() if kind == f.GOAWAY]
        assert goaways, f"no GOAWAY in {[k for k, *_ in self.frames()]}"
        return int.from_bytes(goaways[-1][4:8], "big"), goaways[-1][8:]

    def close(self) -> None:
        self.sock.close()


def beside(address: str, attack: Callable[[], T], calls: int = 3) -> T:
    """Run `attack` in a thread while a real client calls, at least `calls` times and for as
    long as the attack runs: each call must answer right within DEADLINE_S."""
    client = triton_grpc.InferenceServerClient(address)
    rows = np.arange(4, dtype=np.float32).reshape(1, 4)
    tensor = triton_grpc.InferInput("input-0", [1, 4], "FP32")
    tensor.set_data_from_numpy(rows)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(attack)
        made = 0
        while made < calls or not running.done():
            answer = client.infer("doubler", [tensor], client_timeout=DEADLINE_S)
            np.testing.assert_array_equal(answer.as_numpy("output-0"), rows * 2)
            made += 1
            time.sleep(0.05)
        result = running.result()
    client.close()
    return result
