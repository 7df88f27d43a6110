"""Streams under the other HTTP servers (`--http uvicorn`, `--http granian`): the same events
as under Headway's own server, an error inside a stream as its last event, and a client that
drops its stream withdraws its request, so the model's sequences are free for the next ones."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import orjson
import pytest

from headway.launcher import ServerProcess, free_port
from tests.integration.text_models import spell

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["uvicorn", "granian"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    root = spell(tmp_path_factory.mktemp("repository"))
    tmp = tmp_path_factory.mktemp("state")
    # neither announces the port it bound, so each is given one
    with ServerProcess(root, state=tmp / "state.db", port=free_port(), workers=1,
                       extra=["--http", request.param], log=tmp / "server.log") as srv:  # fmt: skip
        yield srv


def streamed(server: ServerProcess, prompt: str) -> list[str]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=10,
                       max_retries=0) as client:  # fmt: skip
        chunks = client.completions.create(model="spell", prompt=prompt, stream=True)
        return [chunk.choices[0].text for chunk in chunks if chunk.choices[0].text]


def test_a_stream_and_an_error_inside_one(server: ServerProcess) -> None:
    assert streamed(server, "a b c") == ["a ", "b ", "c "]
    with pytest.raises(openai.APIError, match="the spell broke at its third word"):
        streamed(server, "fail at three")


def test_streams_dropped_by_their_clients_free_their_sequences(server: ServerProcess) -> None:
    body = orjson.dumps({"text_input": "slow 1000"})
    head = (b"POST /v2/models/spell/generate_stream HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))  # fmt: skip
    for _ in range(32):  # twice the model's 16 sequences, each dropped after its first event
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(head + body)
            assert sock.recv(1 << 16).startswith(b"HTTP/1.1 200")
    with ThreadPoolExecutor(16) as pool:  # all 16 at once: none waits for a dropped one
        answers = list(pool.map(lambda _: "".join(streamed(server, "slow 3")), range(16)))
    assert answers == ["x x x "] * 16
