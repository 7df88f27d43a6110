"""TLS on the server's ports: its certificate, and handshakes bounded in number and in time.

`headway serve --tls-cert FILE --tls-key FILE` serves HTTPS on the HTTP port and gRPC over TLS
on the gRPC port (ALPN `h2`, as Triton's `--grpc-use-ssl`), each port with its own context
(`server_tls`). A connection on a TLS port is a `Handshake` from its accept until its
handshake ends: that is when its server's own protocol (`api.connection`, `api.grpc.http2`)
is made, so nothing of HTTP is allocated for a peer that never finishes. `Handshakes` bounds
them as nginx bounds a handshake by its header timeout and counts it as a connection: each
must finish within the server's header timeout, and they count against `--max-connections`
from their accept; at the cap the oldest one still in its handshake is closed to make room
(as the HTTP/1.1 server closes its oldest idle connection), so a flood of half-open
handshakes holds at most the cap's sockets and cannot lock out a client that finishes its
handshake promptly.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headway.errors import ConfigError

log = logging.getLogger("headway.tls")

#: The oldest TLS version served (Mozilla's "intermediate" profile and nginx's default: TLS 1.0
#: and 1.1 are deprecated by RFC 8996). Ciphers are the standard library's defaults.
MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2
#: What each port offers in ALPN (RFC 7301): HTTP/1.1, and h2 for gRPC (RFC 9113 section 3.2).
HTTP1_ALPN = "http/1.1"
H2_ALPN = "h2"
#: Seconds a TLS connection the server closes has to take its last answer and the server's
#: close_notify (asyncio's default is 30; nginx's lingering close waits up to 5 s for a peer to
#: go quiet): a peer that neither reads nor answers holds its socket no longer than this.
SHUTDOWN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ServerTls:
    """One TLS context per port (HTTP/1.1 on the HTTP port, h2 on the gRPC port), and the
    files they were made from (for an HTTP server that makes its own: uvicorn, granian)."""

    http: ssl.SSLContext
    grpc: ssl.SSLContext
    cert: Path
    key: Path


def server_tls(cert: Path | None, key: Path | None) -> ServerTls | None:
    """The server's TLS contexts from its certificate chain and key files (PEM), or None when
    neither is given. A ConfigError names what is wrong (one without the other, a file that
    cannot be read, a key that is not the certificate's) before anything listens."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise ConfigError(
            f"{given} needs {missing} too (HEADWAY_TLS_CERT and HEADWAY_TLS_KEY): TLS takes "
            "the certificate chain and its private key, both PEM files"
        )
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        try:
            path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: cannot read it ({exc.strerror})") from None
    return ServerTls(
        http=server_context(cert, key, HTTP1_ALPN),
        grpc=server_context(cert, key, H2_ALPN),
        cert=cert,
        key=key,
    )


def server_context(cert: Path, key: Path, alpn: str) -> ssl.SSLContext:
    """A server context over `cert` and `key` that offers `alpn`: TLS 1.2 or later, the
    standard library's ciphers, no compression and no renegotiation (a client-initiated
    renegotiation costs the server a handshake for free)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MINIMUM_VERSION
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"--tls-cert {cert} and --tls-key {key} cannot be used together: {_reason(exc)} "
            "(both must be PEM, the key the certificate's own, and not encrypted)"
        ) from None
    context.set_alpn_protocols([alpn])
    return context


def standard_ciphers() -> str:
    """The standard library's default cipher list, as an OpenSSL cipher string (for an HTTP
    server that sets its own list: uvicorn's default admits TLS 1.0's ciphers)."""
    return ":".join(
        cipher["name"] for cipher in ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).get_ciphers()
    )


def _reason(exc: ssl.SSLError) -> str:
    reason = exc.reason or str(exc)
    return {
        "KEY_VALUES_MISMATCH": "the key is not the certificate's",
        "PEM_LIB": "a file is not PEM, or holds no certificate or key",
        "NO_START_LINE": "a file is not PEM",
    }.get(reason, reason.lower().replace("_", " "))


class Handshakes:
    """The TLS handshakes under way on one listening port (see the module docstring).

    `protocol` is the listening server's protocol factory: each accepted connection is a
    `Handshake`, which makes the server's own protocol with `connection` once its handshake
    is done. `established` is the server's set of connections (counted with the handshakes
    against `cap`); a handshake must finish within `timeout` seconds."""

    def __init__(
        self,
        context: ssl.SSLContext,
        connection: Callable[[], asyncio.Protocol],
        *,
        established: Sized,
        cap: int,
        timeout: float,
        accept_pending: Callable[[], None] = lambda: None,
    ) -> None:
        self.context = context
        self.connection = connection
        self.established = established
        self.cap = cap
        self.timeout = timeout
        self.accept_pending = accept_pending
        #: In the order they were accepted (a dict keeps it): the first is the oldest.
        self.pending: dict[Handshake, None] = {}

    def protocol(self) -> Handshake:
        return Handshake(self)

    def admit(self, handshake: Handshake) -> None:
        """Count a new handshake; at the cap, close the oldest one still under way."""
        while self.pending and len(self.pending) + len(self.established) >= self.cap:
            oldest = next(iter(self.pending))
            log.debug("closing a TLS handshake to make room (--max-connections %d)", self.cap)
            oldest.abort()  # which forgets it (`done`)
        self.pending[handshake] = None

    def done(self, handshake: Handshake) -> None:
        self.pending.pop(handshake, None)

    def close(self) -> None:
        """Abort every handshake still under way (the server stops)."""
        for handshake in list(self.pending):
            handshake.abort()


class Handshake(asyncio.Protocol):
    """A connection on a TLS port until its handshake ends; then its server's own protocol
    takes the TLS transport over, with any bytes that came before it was ready."""

    __slots__ = ("_early", "connection", "handshakes", "transport")

    def __init__(self, handshakes: Handshakes) -> None:
        self.handshakes = handshakes
        self.transport: asyncio.Transport | None = None
        self.connection: asyncio.Protocol | None = None
        self._early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        handshakes = self.handshakes
        handshakes.accept_pending()
        handshakes.admit(self)
        self._resume(self._handshake())

    def _resume(self, handshake: Coroutine[Any, Any, None]) -> None:
        """Run the handshake up to where it waits, now, and on from there when what it waits
        for is done. Now, not in a task: `start_tls` must take the transport over before the
        loop reads the ClientHello (uvloop starts reading once `connection_made` returns)."""
        try:
            waiting = handshake.send(None)
        except StopIteration:
            return
        if isinstance(waiting, asyncio.Future):
            waiting.add_done_callback(lambda _: self._resume(handshake))
        else:  # a bare yield: go on next turn
            asyncio.get_running_loop().call_soon(self._resume, handshake)

    async def _handshake(self) -> None:
        handshakes = self.handshakes
        transport = self.transport
        assert transport is not None
        try:
            tls = await asyncio.get_running_loop().start_tls(
                transport,
                self,
                handshakes.context,
                server_side=True,
                ssl_handshake_timeout=handshakes.timeout,
                ssl_shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            )
        except Exception as exc:  # an SSLError, the timeout, a peer that left: never raised
            log.debug("TLS handshake failed: %r", exc)
            transport.abort()
            return
        finally:
            handshakes.done(self)
        if tls is None or tls.is_closing():  # aborted to make room, or the peer left
            return
        connection = self.connection = handshakes.connection()
        tls.set_protocol(connection)
        connection.connection_made(tls)
        for data in self._early:  # read before the connection was there to hear it
            connection.data_received(data)
        self._early.clear()

    def abort(self) -> None:
        self.handshakes.done(self)
        if self.transport is not None:
            self.transport.abort()

    # -- until the server's own protocol takes over ----------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.connection is not None:
            self.connection.data_received(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool | None:
        return None if self.connection is None else self.connection.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.handshakes.done(self)
        if self.connection is not None:
            self.connection.connection_lost(exc)
