"""Attacks on the streaming routes, at the byte level over raw sockets against a live server,
with a real client streaming beside each: a reader that stops reading mid-stream, a flood of
streams opened and cancelled (HTTP/1.1 and HTTP/2), and streams that withdraw their sequences
when their clients go, so the model's sequences are free for the next clients."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import openai
import orjson
import pytest
from tritonclient.grpc import service_pb2

from headway.api.grpc import frames as f
from headway.launcher import ServerProcess
from tests.integration.h2_attacker import HEADERS, Attacker
from tests.integration.text_models import spell

pytestmark = pytest.mark.integration
T = TypeVar("T")
#: Seconds a legitimate stream beside an attack may take.
DEADLINE_S = 10.0
STREAM_PATH = b"/inference.GRPCInferenceService/ModelStreamInfer"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = spell(tmp_path_factory.mktemp("repository"), max_parts=1_000_000)
    tmp = tmp_path_factory.mktemp("state")
    extra = ["--stream-buffer-mb", "0.1"]
    with ServerProcess(root, state=tmp / "state.db", workers=1, extra=extra,
                       log=tmp / "server.log") as srv:  # fmt: skip
        yield srv


def streamed(server: ServerProcess, prompt: str = "a b c d") -> str:
    """A legitimate client's streamed completion, within DEADLINE_S."""
    with openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=DEADLINE_S,
                       max_retries=0) as client:  # fmt: skip
        chunks = client.completions.create(model="spell", prompt=prompt, stream=True)
        return "".join(chunk.choices[0].text for chunk in chunks)


def beside(server: ServerProcess, attack: Callable[[], T], calls: int = 3) -> T:
    """Run `attack` in a thread while a real client streams, at least `calls` times and for as
    long as the attack runs: each stream must end right within DEADLINE_S."""
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(attack)
        made = 0
        while made < calls or not running.done():
            assert streamed(server) == "a b c d "
            made += 1
            time.sleep(0.05)
        return running.result()


def http_request(path: str, body: dict[str, object]) -> bytes:
    data = orjson.dumps(body)
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data  # fmt: skip


def test_a_reader_that_stops_reading_mid_stream_is_cut_off(server: ServerProcess) -> None:
    """A fast stream read by nobody: before the bound its events piled up in the server for
    the whole write timeout; now the stream is cut at --stream-buffer-mb and withdrawn."""

    def attack() -> bytes:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        sock.sendall(http_request("/v1/completions", {"model": "spell", "prompt": "big 100000",
                                                      "max_tokens": 100000, "stream": True}))  # fmt: skip
        time.sleep(3)  # reads nothing while the server fills its socket and its buffer
        sock.settimeout(10)
        received = b""
        try:
            while chunk := sock.recv(1 << 16):
                received += chunk
        except OSError:
            pass  # reset: what came before it is kept
        sock.close()
        return received

    received = beside(server, attack)
    assert received.startswith(b"HTTP/1.1 200") and b"\r\n0\r\n\r\n" not in received
    assert len(received) < 100 * 2**20  # cut long before the stream's end (400 MiB)


def test_streams_opened_and_dropped_free_their_sequences(server: ServerProcess) -> None:
    """A flood of slow streams each dropped after its first event: each is withdrawn, so the
    model's 16 sequences are free again for 16 real clients at once."""
    port = int(server.url.rsplit(":", 1)[1])

    def attack() -> int:
        for _ in range(48):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(http_request("/v2/models/spell/generate_stream",
                                          {"text_input": "slow 1000"}))  # fmt: skip
                assert sock.recv(1 << 16).startswith(b"HTTP/1.1 200")
        return 48

    assert beside(server, attack) == 48
    time.sleep(0.5)  # the last withdrawals take effect at their sequences' next step
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: streamed(server, "slow 3"), range(16)))
    assert answers == ["x x x "] * 16


def test_grpc_streams_opened_and_reset_get_goaway_enhance_your_calm(
    server: ServerProcess,
) -> None:
    request = service_pb2.ModelInferRequest(model_name="spell")
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1, 1])
    prompt = b"slow 1000"
    request.raw_input_contents.append(len(prompt).to_bytes(4, "little") + prompt)
    body = request.SerializeToString()
    message = b"\x00" + len(body).to_bytes(4, "big") + body
    headers = [(n, STREAM_PATH if n == b":path" else v) for n, v in HEADERS]

    def attack() -> tuple[int, bytes]:
        attacker = Attacker(server.grpc_address)
        block = attacker.encoder.encode(headers)
        open_and_reset = (
            f.frame(f.HEADERS, f.END_HEADERS, s, block)
            + f.frame(f.DATA, 0, s, message)
            + f.rst_stream(s, f.CANCEL)
            for s in range(1, 100_001, 2)
        )
        attacker.flood(open_and_reset)
        return attacker.goaway()

    code, reason = beside(server, attack)
    assert code == f.ENHANCE_YOUR_CALM and b"streams reset" in reason
    time.sleep(0.5)
    with ThreadPoolExecutor(16) as pool:  # every withdrawn sequence is free again
        answers = list(pool.map(lambda _: streamed(server, "slow 3"), range(16)))
    assert answers == ["x x x "] * 16
