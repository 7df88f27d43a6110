"""TLS without a live `headway serve`: the files checked before anything listens, the handshake
bound (the oldest half-open handshake makes room at the cap), and Headway's HTTP server over
TLS on a real loopback socket, its handshakes aborted when it stops."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from tests.api.echo_server import EchoApp, request, response
from tests.integration.certificates import Certificates, issue

from headway.api.http import HttpServer
from headway.api.tls import H2_ALPN, Handshakes, server_context, server_tls
from headway.errors import ConfigError


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return issue(tmp_path_factory.mktemp("certificates"))


def test_no_files_no_tls_and_both_files_a_context_per_port(certificates: Certificates) -> None:
    assert server_tls(None, None) is None
    tls = server_tls(certificates.cert, certificates.key)
    assert tls is not None and tls.http is not tls.grpc
    for context in (tls.http, tls.grpc):
        assert context.minimum_version == ssl.TLSVersion.TLSv1_2
        assert context.options & ssl.OP_NO_RENEGOTIATION and context.options & ssl.OP_NO_COMPRESSION


def test_a_file_without_the_other_is_refused_naming_the_missing_one(
    certificates: Certificates,
) -> None:
    with pytest.raises(ConfigError, match="--tls-cert needs --tls-key"):
        server_tls(certificates.cert, None)
    with pytest.raises(ConfigError, match="--tls-key needs --tls-cert"):
        server_tls(None, certificates.key)


def test_unreadable_and_mismatched_files_are_refused_with_the_reason(
    certificates: Certificates, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"--tls-key .*missing.pem: cannot read it"):
        server_tls(certificates.cert, tmp_path / "missing.pem")
    other = issue(tmp_path)  # another key: not the certificate's
    with pytest.raises(ConfigError, match="the key is not the certificate's"):
        server_tls(certificates.cert, other.key)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="cannot be used together"):
        server_context(garbage, certificates.key, H2_ALPN)


class FakeHandshake:
    """A handshake under way, as `Handshakes` sees it: aborting it ends it."""

    def __init__(self, handshakes: Handshakes) -> None:
        self.handshakes = handshakes
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True
        self.handshakes.done(self)  # type: ignore[arg-type]


def test_at_the_cap_the_oldest_handshake_makes_room(certificates: Certificates) -> None:
    established: set[object] = {object(), object()}
    handshakes = Handshakes(
        ssl.create_default_context(), lambda: None,  # type: ignore[arg-type, return-value]
        established=established, cap=5, timeout=1.0,
    )  # fmt: skip
    made = [FakeHandshake(handshakes) for _ in range(6)]
    for handshake in made[:3]:  # 2 connections and 3 handshakes: the cap
        handshakes.admit(handshake)  # type: ignore[arg-type]
    assert not any(h.aborted for h in made)
    handshakes.admit(made[3])  # type: ignore[arg-type]
    assert made[0].aborted and not made[1].aborted
    handshakes.done(made[1])  # type: ignore[arg-type]  # finished: room without aborting
    handshakes.admit(made[4])  # type: ignore[arg-type]
    assert [h.aborted for h in made[:5]] == [True, False, False, False, False]
    assert len(handshakes.pending) + len(established) == 5
    # With the cap all connections, a new handshake still gets its turn (it is then the one
    # that makes room for the next): the server's own cap on connections answers it.
    established.update(object() for _ in range(10))
    handshakes.admit(made[5])  # type: ignore[arg-type]
    assert made[2].aborted and made[3].aborted and made[4].aborted and not made[5].aborted
    assert list(handshakes.pending) == [made[5]]
    handshakes.close()
    assert made[5].aborted and not handshakes.pending


def test_the_http_server_answers_over_tls_and_aborts_handshakes_when_it_stops(
    certificates: Certificates,
) -> None:
    tls = server_tls(certificates.cert, certificates.key)
    assert tls is not None
    client = ssl.create_default_context(cafile=str(certificates.ca))

    async def main() -> None:
        server = HttpServer(EchoApp(), port=0, tls=tls.http, header_timeout=30.0)  # type: ignore[arg-type]
        await server.start()
        assert server.url.startswith("https://")
        for _ in range(2):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=client, server_hostname="localhost"
            )
            writer.write(request("/now/tls"))
            status, _, body = await response(reader)
            assert status == 200 and b"/now/tls" in body
            writer.close()
        silent, _ = await asyncio.open_connection("127.0.0.1", server.port)  # no ClientHello
        for _ in range(100):
            if server._handshakes is not None and server._handshakes.pending:
                break
            await asyncio.sleep(0.01)
        assert server._handshakes is not None and len(server._handshakes.pending) == 1
        await server.stop()
        assert await asyncio.wait_for(silent.read(), 5) == b""  # closed, not left to time out

    asyncio.run(main())


class Recorder(asyncio.Protocol):
    """The server's own protocol, as a handshake hands the connection over to it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append(("made", transport))

    def data_received(self, data: bytes) -> None:
        self.events.append(("data", data))


class FakeTransport:
    def __init__(self) -> None:
        self.protocol: asyncio.BaseProtocol | None = None
        self.aborted = False

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


def test_bytes_read_before_the_handover_reach_the_connection_after_it() -> None:
    """asyncio's own TLS reads the first application bytes before `start_tls` returns: they
    wait in the handshake and follow `connection_made` (uvloop reads them a turn later)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        recorder = Recorder()
        tls = FakeTransport()

        async def start_tls(
            transport: object, protocol: asyncio.Protocol, *a: object, **k: object
        ) -> FakeTransport:
            await asyncio.sleep(0)  # a bare yield, as a turn of the handshake
            protocol.data_received(b"GET / HTTP/1.1\r\n")  # with the client's Finished
            return tls

        loop.start_tls = start_tls  # type: ignore[method-assign]
        handshakes = Handshakes(
            ssl.create_default_context(), lambda: recorder, established=set(), cap=4, timeout=1.0
        )
        handshake = handshakes.protocol()
        handshake.connection_made(FakeTransport())  # type: ignore[arg-type]
        assert list(handshakes.pending) == [handshake]
        for _ in range(5):
            await asyncio.sleep(0)
        assert recorder.events == [("made", tls), ("data", b"GET / HTTP/1.1\r\n")]
        assert tls.protocol is recorder and not handshakes.pending
        handshake.data_received(b"late")  # what still reaches it goes on to the connection
        assert recorder.events[-1] == ("data", b"late")

    asyncio.run(main())
