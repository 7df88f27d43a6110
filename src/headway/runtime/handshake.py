"""Who may be a worker: a challenge and an HMAC of it, keyed by a secret of the server's.

The worker endpoint may be a TCP port other machines reach, so a process that connects must
prove it was started by this server: it answers a fresh challenge with its identity and
HMAC-SHA256(secret, challenge + identity). The secret travels in the workers' environment
(never their command line); a challenge is never reused, so an overheard proof opens nothing.
Every engine that moves workers over `runtime.wire` uses these functions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

#: The environment variable that hands a spawned worker the server's secret (the worker
#: removes it from its environment, so processes its models start do not inherit it).
SECRET_ENV = "HEADWAY_WORKER_SECRET"


def new_secret() -> str:
    """A fresh secret for one server's workers."""
    return secrets.token_hex(32)


def challenge() -> dict[str, Any]:
    """The first message on a new worker connection (its nonce is never reused)."""
    return {"op": "challenge", "nonce": secrets.token_hex(16)}


def hello(secret: str, challenge: dict[str, Any], identity: str, pid: int) -> dict[str, Any]:
    """A worker's answer to `challenge`: who it is, and proof that it holds `secret`."""
    return {
        "op": "hello",
        "identity": identity,
        "pid": pid,
        "proof": _proof(secret, str(challenge.get("nonce", "")), identity),
    }


def refusal(secret: str, challenge: dict[str, Any], hello: dict[str, Any]) -> str | None:
    """None when `hello` answers `challenge` with the secret; else why it is refused."""
    if not isinstance(hello, dict) or hello.get("op") != "hello":
        return "its first message is not a hello"
    proof = hello.get("proof")
    if not isinstance(proof, str):
        return "its hello carries no proof of the server's secret"
    expected = _proof(secret, challenge["nonce"], str(hello.get("identity", "")))
    if not hmac.compare_digest(proof.encode(), expected.encode()):
        return "its proof does not match the server's secret"
    return None


def _proof(secret: str, nonce: str, identity: str) -> str:
    message = f"{nonce}:{identity}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
