"""The launcher the tests, the demo and the benchmarks start servers with: a server that fails
to start says why in the test output, and ports taken by other processes do not fail a start."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from headway import launcher
from headway.launcher import ServerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port that another process (this one) listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_server_that_cannot_start_quotes_its_log(tmp_path: Path, taken: int) -> None:
    server = ServerProcess(tmp_path, state=tmp_path / "state.db", port=taken, grpc_port=0)
    with pytest.raises(RuntimeError) as failed:
        server.start()
    message = str(failed.value)
    assert message.startswith("headway serve exited with 1; the end of its log (")
    assert "address already in use" in message


def test_ports_taken_before_the_server_binds_them_do_not_fail_the_start(
    tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    picks = iter([taken])  # the first gRPC port picked is taken by the time the server binds
    real = launcher.free_port
    monkeypatch.setattr(launcher, "free_port", lambda: next(picks, None) or real())
    with ServerProcess(tmp_path, state=tmp_path / "state.db") as server:
        assert server.grpc_port not in (taken, 0) and server.port not in (taken, 0)
        assert httpx.get(f"{server.url}/v2/health/live", timeout=10).status_code == 200
