"""What a client trusts and shows: the server's certificate (TLS) and the server's tokens.

`verify` says which certificates a client trusts on an https:// URL (REST) or a TLS channel
(gRPC): True, the public certificate authorities (httpx's and grpcio's own lists); a path, a
PEM file of authorities (a private CA's certificate, or a self-signed server's own); False,
none checked (REST only, for a test bench: anyone in between can read and change the traffic).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc

#: What `verify` may be.
Verify = bool | str | Path


def tls_context(verify: Verify) -> ssl.SSLContext | bool:
    """httpx's `verify` for `verify`: a bool as it is, a file as a context that trusts it (the
    standard library's defaults: TLS 1.2 or later, the host name checked)."""
    if isinstance(verify, bool):
        return verify
    return ssl.create_default_context(cafile=str(verify))


def grpc_credentials(verify: Verify) -> grpc.ChannelCredentials:
    """A gRPC channel's TLS credentials (grpcio checks every certificate: no False)."""
    if verify is False:
        raise ValueError(
            "a gRPC channel always checks the server's certificate: pass verify=<the CA's "
            "PEM file> for a private or self-signed certificate"
        )
    if verify is True:
        return grpc.ssl_channel_credentials()
    return grpc.ssl_channel_credentials(root_certificates=Path(verify).read_bytes())


def bearer(token: str | None) -> dict[str, str]:
    """The Authorization header that carries `token` (none without one)."""
    return {"authorization": f"Bearer {token}"} if token else {}
