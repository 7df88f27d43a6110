"""The known attacks on HTTP/2 servers, against a live server's gRPC port at the byte level,
each with a real `tritonclient.grpc` client calling beside it whose calls must all answer
within their deadline (`h2_attacker.beside`): each attack ends in GOAWAY, a reset or a status
at its bound, small bounds set by the server's flags so that each is quick."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import hpack
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_aio
from tritonclient.utils import InferenceServerException

from headway.api.grpc import frames as f
from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.h2_attacker import DEADLINE_S, HEADERS, Attacker, beside, infer_message

pytestmark = pytest.mark.integration

TIMEOUT_S = 3.0  # --write-timeout, --grpc-idle-timeout, --header-timeout
MAX_CONNECTIONS = 16
PING = f.frame(f.PING, 0, 0, b"12345678")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("h2-repository")
    models.python_model(root, "doubler", "Doubler")
    state = tmp_path_factory.mktemp("h2-state") / "state.db"
    log = tmp_path_factory.mktemp("h2-logs") / "server.log"
    extra = [
        "--max-body-mb", "1", "--grpc-max-buffered-mb", "8",
        "--max-connections", str(MAX_CONNECTIONS), "--body-timeout", "5",
        "--header-timeout", str(TIMEOUT_S), "--write-timeout", str(TIMEOUT_S),
        "--grpc-idle-timeout", str(TIMEOUT_S),
    ]  # fmt: skip
    with ServerProcess(root, state=state, extra=extra, log=log) as srv:
        yield srv


def inferences(server: ServerProcess) -> int:
    stats = httpx.get(f"{server.url}/v2/models/doubler/stats").json()
    return int(stats["model_stats"][0]["inference_count"])


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def statuses(attacker: Attacker) -> list[bytes]:
    """The grpc-status of each answer the server sent (its blocks are never indexed)."""
    out = []
    for kind, _, _, payload in attacker.frames():
        if kind == f.HEADERS:
            headers = dict(hpack.Decoder().decode(payload, raw=True))
            if b"grpc-status" in headers:
                out.append(headers[b"grpc-status"])
    return out


# -- what real clients do is not an attack ----------------------------------------------------
def test_many_calls_on_one_channel_with_keepalive_pings_are_all_answered(
    guarded: ServerProcess,
) -> None:
    keepalive = triton_grpc.KeepAliveOptions(
        keepalive_time_ms=100,  # as often as the client lets itself ping
        keepalive_timeout_ms=5000,
        keepalive_permit_without_calls=True,
        http2_max_pings_without_data=0,
    )

    async def calls() -> int:
        async with triton_aio.InferenceServerClient(
            guarded.grpc_address, keepalive_options=keepalive
        ) as client:
            answered = 0
            for wave in range(10):  # 10 waves of 128 calls at once, pinging between
                sent = [np.full((1, 4), wave * 1000 + i, np.float32) for i in range(128)]
                answers = await asyncio.gather(*(
                    client.infer("doubler", [tensor(rows)], client_timeout=DEADLINE_S)
                    for rows in sent
                ))  # fmt: skip
                for rows, answer in zip(sent, answers, strict=True):
                    np.testing.assert_array_equal(answer.as_numpy("output-0"), rows * 2)
                answered += len(answers)
                await asyncio.sleep(0.2)
            return answered

    assert asyncio.run(calls()) == 1280


def tensor(rows: np.ndarray) -> triton_aio.InferInput:
    tensor = triton_aio.InferInput("input-0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    return tensor


# -- rapid reset (CVE-2023-44487) --------------------------------------------------------------
def test_streams_opened_and_reset_at_once_get_goaway_enhance_your_calm(
    guarded: ServerProcess,
) -> None:
    def attack() -> tuple[int, bytes]:
        attacker = Attacker(guarded.grpc_address)
        batches = (
            b"".join(
                attacker.head(s) + f.rst_stream(s, f.CANCEL) for s in range(first, first + 800, 2)
            )
            for first in range(1, 200_001, 800)
        )
        attacker.flood(batches)  # 400 streams a write, 100,000 at most
        return attacker.goaway()

    code, message = beside(guarded.grpc_address, attack)
    assert code == f.ENHANCE_YOUR_CALM and b"streams reset" in message


def test_calls_reset_at_once_run_no_more_than_the_resets_allowed(guarded: ServerProcess) -> None:
    message = infer_message(np.ones((1, 4), np.float32))
    before = inferences(guarded)

    def attack() -> tuple[int, bytes]:
        attacker = Attacker(guarded.grpc_address)
        batches = (
            b"".join(
                attacker.head(s)
                + f.frame(f.DATA, f.END_STREAM, s, message)
                + f.rst_stream(s, f.CANCEL)
                for s in range(first, first + 800, 2)
            )
            for first in range(1, 20_001, 800)
        )
        attacker.flood(batches)  # 10,000 inferences asked for, each withdrawn at once
        return attacker.goaway()

    code, _ = beside(guarded.grpc_address, attack)
    assert code == f.ENHANCE_YOUR_CALM
    time.sleep(0.5)  # what still ran
    assert inferences(guarded) - before < 1500  # the resets allowed, and the calls beside


# -- CONTINUATION flood (CVE-2024-27316) -------------------------------------------------------
def test_a_flood_of_empty_continuation_frames_gets_goaway(guarded: ServerProcess) -> None:
    def attack() -> tuple[int, bytes]:
        attacker = Attacker(guarded.grpc_address)
        attacker.send(f.frame(f.HEADERS, 0, 1, attacker.encoder.encode(HEADERS)[:3]))
        attacker.flood(itertools.repeat(f.frame(f.CONTINUATION, 0, 1) * 10_000, 100))
        return attacker.goaway()

    code, message = beside(guarded.grpc_address, attack)
    assert code == f.ENHANCE_YOUR_CALM and b"CONTINUATION" in message


def test_a_header_block_left_unfinished_gets_goaway_after_the_header_timeout(
    guarded: ServerProcess,
) -> None:
    def attack() -> tuple[int, bytes]:
        attacker = Attacker(guarded.grpc_address)
        attacker.send(f.frame(f.HEADERS, 0, 1, attacker.encoder.encode(HEADERS)[:3]))
        return attacker.goaway(timeout=TIMEOUT_S + 10)

    code, message = beside(guarded.grpc_address, attack)
    assert code == f.ENHANCE_YOUR_CALM and b"header block unfinished" in message


# -- PING and SETTINGS floods (CVE-2019-9512, CVE-2019-9515) ------------------------------------
def test_a_ping_flood_gets_goaway_enhance_your_calm(guarded: ServerProcess) -> None:
    def attack() -> tuple[int, bytes]:
        attacker = Attacker(guarded.grpc_address)
        attacker.flood(itertools.repeat(PING * 5000, 200))
        return attacker.goaway()

    code, message = beside(guarded.grpc_address, attack)
    assert code == f.ENHANCE_YOUR_CALM and b"PINGs" in message


def test_a_settings_flood_gets_goaway_enhance_your_calm(guarded: ServerProcess) -> None:
    def attack() -> tuple[int, bytes]:
        attacker = Attacker(guarded.grpc_address)
        attacker.flood(itertools.repeat(f.settings({f.MAX_FRAME_SIZE: 16_384}) * 1000, 200))
        return attacker.goaway()

    code, message = beside(guarded.grpc_address, attack)
    assert code == f.ENHANCE_YOUR_CALM and b"SETTINGS" in message


# -- memory ------------------------------------------------------------------------------------
def test_request_bytes_held_for_unfinished_calls_are_bounded(guarded: ServerProcess) -> None:
    assert guarded.process is not None
    pid = guarded.process.pid
    first = b"\x00" + (1_000_000).to_bytes(4, "big") + b"\x00" * 16_379  # a message never ending
    rest = b"\x00" * 16_384

    def exhausted(attackers: list[Attacker]) -> int:
        return sum(statuses(a).count(b"8") for a in attackers)

    def attack() -> tuple[int, list[Attacker]]:
        before = rss_bytes(pid)
        attackers = []
        for _ in range(6):  # 6 connections, 10 calls each, 950 KB sent on each: 57 MB
            attacker = Attacker(guarded.grpc_address)
            for s in range(1, 21, 2):
                data = f.frame(f.DATA, 0, s, first) + f.frame(f.DATA, 0, s, rest) * 57
                attacker.send(attacker.head(s) + data)
            attackers.append(attacker)
        # what the server holds once it has read it all: the refusals are its last answers
        deadline = time.monotonic() + 10.0
        while exhausted(attackers) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        return rss_bytes(pid) - before, attackers

    grown, attackers = beside(guarded.grpc_address, attack)
    refused = exhausted(attackers)
    for attacker in attackers:
        attacker.close()
    assert grown < 30 * 2**20  # held: --grpc-max-buffered-mb 8
    assert refused >= 40  # the calls past 2 MiB a connection, and past 8 MiB in all


# -- clients that do not read ------------------------------------------------------------------
def test_a_client_that_stops_reading_is_dropped_after_the_write_timeout(
    guarded: ServerProcess,
) -> None:
    rows = np.ones((60_000, 4), np.float32)  # 960,000 bytes each way
    body = infer_message(rows)
    pieces = [body[at : at + 16_384] for at in range(0, len(body), 16_384)]
    calls = 20

    def attack() -> tuple[int, bool]:
        own = {f.INITIAL_WINDOW_SIZE: f.MAX_WINDOW}
        attacker = Attacker(guarded.grpc_address, own, read=False, receive_buffer=65_536)
        attacker.send(f.window_update(0, f.MAX_WINDOW - f.DEFAULT_WINDOW))
        for s in range(1, 2 * calls, 2):
            last = len(pieces) - 1
            frames = [
                f.frame(f.DATA, f.END_STREAM if i == last else 0, s, p)
                for i, p in enumerate(pieces)
            ]
            if not attacker.send(attacker.head(s) + b"".join(frames)):
                break
        time.sleep(TIMEOUT_S + 3)  # reading nothing
        attacker.start_reading()
        attacker.ended.wait(10)
        return len(attacker.received), attacker.ended.is_set()

    received, ended = beside(guarded.grpc_address, attack)
    assert ended and received < calls * len(body)


def test_an_answer_stuck_at_a_zero_window_gets_goaway_after_the_write_timeout(
    guarded: ServerProcess,
) -> None:
    def attack() -> tuple[int, bytes]:
        attacker = Attacker(guarded.grpc_address, {f.INITIAL_WINDOW_SIZE: 0})
        message = infer_message(np.ones((1, 4), np.float32))
        attacker.send(attacker.head(1) + f.frame(f.DATA, f.END_STREAM, 1, message))
        return attacker.goaway(timeout=TIMEOUT_S + 10)

    code, message = beside(guarded.grpc_address, attack)
    assert code == f.ENHANCE_YOUR_CALM and b"flow-control window" in message


# -- idle connections --------------------------------------------------------------------------
def test_an_idle_connection_gets_goaway_no_error_though_it_pings(guarded: ServerProcess) -> None:
    def attack() -> tuple[int, bytes]:
        attacker = Attacker(guarded.grpc_address)
        give_up = time.monotonic() + TIMEOUT_S + 10
        while not attacker.ended.is_set() and time.monotonic() < give_up:
            attacker.send(PING)
            time.sleep(0.25)
        return attacker.goaway(timeout=1)

    code, _ = beside(guarded.grpc_address, attack)
    assert code == f.NO_ERROR


def test_idle_connections_at_the_cap_give_way_to_real_clients(guarded: ServerProcess) -> None:
    idle = [Attacker(guarded.grpc_address) for _ in range(MAX_CONNECTIONS)]
    try:
        beside(guarded.grpc_address, lambda: None, calls=5)
        code, _ = idle[0].goaway(timeout=1)  # the one idle longest made room
        assert code == f.NO_ERROR
    finally:
        for attacker in idle:
            attacker.close()


def test_a_connection_refused_at_the_cap_gets_settings_before_goaway(
    guarded: ServerProcess,
) -> None:
    busy = []
    for _ in range(MAX_CONNECTIONS):  # each with a call whose request is still to come
        attacker = Attacker(guarded.grpc_address)
        attacker.send(attacker.head(1))
        busy.append(attacker)
    try:
        refused = Attacker(guarded.grpc_address)
        code, message = refused.goaway()
        assert code == f.REFUSED_STREAM and b"too many connections" in message
        assert refused.frames()[0][0] == f.SETTINGS
        client = triton_grpc.InferenceServerClient(guarded.grpc_address)
        with pytest.raises(InferenceServerException) as caught:
            client.is_server_live(client_timeout=5.0)
        assert "Expected SETTINGS frame" not in str(caught.value)
        client.close()
    finally:
        for attacker in busy:
            attacker.close()
        wait_for_room(guarded)


def wait_for_room(server: ServerProcess) -> None:
    """Until the server has read that the connections closed (a call gets a connection)."""
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    give_up = time.monotonic() + 10
    while True:
        try:
            client.is_server_live(client_timeout=5.0)
            break
        except InferenceServerException:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.1)
    client.close()


# -- RFC 9113 ----------------------------------------------------------------------------------
def test_a_window_pushed_past_the_maximum_and_a_reused_stream_id_get_goaway(
    guarded: ServerProcess,
) -> None:
    message = infer_message(np.ones((1, 4), np.float32))

    def attack() -> list[int]:
        overflow = Attacker(guarded.grpc_address)
        overflow.send(overflow.head(1))  # its request still to come: the stream stays open
        overflow.send(f.window_update(1, f.MAX_WINDOW - f.DEFAULT_WINDOW))  # at the maximum
        overflow.send(f.settings({f.INITIAL_WINDOW_SIZE: f.DEFAULT_WINDOW + 1}))
        reused = Attacker(guarded.grpc_address)
        call = reused.head(1) + f.frame(f.DATA, f.END_STREAM, 1, message)
        reused.send(call + reused.head(3) + f.frame(f.DATA, f.END_STREAM, 3, message))
        time.sleep(0.2)
        reused.send(reused.head(1) + f.frame(f.DATA, f.END_STREAM, 1, message))
        return [overflow.goaway()[0], reused.goaway()[0]]

    codes = beside(guarded.grpc_address, attack)
    assert codes == [f.FLOW_CONTROL_ERROR, f.PROTOCOL_ERROR]
