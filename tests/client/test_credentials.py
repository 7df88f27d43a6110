"""What Headway's clients send and trust, without a server: which token goes with which call,
and the TLS settings each transport takes."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from tests.integration.certificates import issue

from headway.client import AsyncClient, Client, GrpcClient
from headway.client.credentials import tls_context
from headway.loadgen.client import Target, http_request
from headway.loadgen.workload import Body


def test_the_inference_token_goes_with_every_call_and_the_admin_token_with_admin_calls() -> None:
    with Client(inference_token="i", token="a") as both:
        assert both._http.headers["authorization"] == "Bearer i"
        assert both._auth() == {"authorization": "Bearer a"}
    with Client(token="a") as admin_only:  # the server takes its admin token everywhere
        assert admin_only._http.headers["authorization"] == "Bearer a"
    with Client() as anonymous:
        assert "authorization" not in anonymous._http.headers and anonymous._auth() == {}
    over_asyncio = AsyncClient(inference_token="i")
    assert over_asyncio._http.headers["authorization"] == "Bearer i"
    asyncio.run(over_asyncio.close())


def test_verify_is_a_bool_or_a_file_of_authorities(tmp_path: Path) -> None:
    assert tls_context(True) is True and tls_context(False) is False
    ca = issue(tmp_path).ca
    context = tls_context(ca)
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    with pytest.raises(FileNotFoundError):
        tls_context(tmp_path / "missing.pem")


def test_a_grpc_channel_always_checks_the_certificate(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="always checks the server's certificate"):
        GrpcClient("127.0.0.1:1", tls=True, verify=False)
    ca = issue(tmp_path).ca
    with GrpcClient("127.0.0.1:1", tls=True, verify=ca, inference_token="i") as client:
        assert client._metadata == (("authorization", "Bearer i"),)
    with GrpcClient("127.0.0.1:1") as plain:
        assert plain._metadata is None


def test_the_load_generator_sends_the_token_and_speaks_tls_to_https(tmp_path: Path) -> None:
    plain = Target.parse("http://h:81/p")
    assert (plain.host, plain.port, plain.prefix, plain.tls, plain.verify) == (
        "h",
        81,
        "/p",
        None,
        True,
    )
    secure = Target.parse("https://h", token="t", ca=issue(tmp_path).ca)
    assert secure.port == 443 and isinstance(secure.tls, ssl.SSLContext)
    assert secure.verify is secure.tls and secure.headers == {"authorization": "Bearer t"}
    wire = http_request(secure, "/v2/models/m/infer", Body(b"{}"))
    assert b"\r\nAuthorization: Bearer t\r\n" in wire
    assert b"Authorization" not in http_request(plain, "/x", Body(b"{}"))
    with pytest.raises(ValueError, match="is not an http"):
        Target.parse("ftp://h")
