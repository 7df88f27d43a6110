"""The tokens: which routes need which, and the one check that compares them.

With an admin token (`--admin-token`, `HEADWAY_ADMIN_TOKEN`) the admin routes (`is_admin`;
docs/security.md lists them) need `Authorization: Bearer <token>`. With an inference token
(`--inference-token`, `HEADWAY_INFERENCE_TOKEN`) every other route needs it or the admin token
(and the admin routes it, without an admin token), except the health probes and the API's
static description (`is_open`): a server that faces a network tells a stranger nothing of its
models, their metadata or their load. Without one, inference, metadata, health and metrics
stay open, as in Triton. A request without the token that a route needs is answered 401 with
a `WWW-Authenticate` header (RFC 6750), gRPC's UNAUTHENTICATED.
"""

from __future__ import annotations

import hmac
import ipaddress

from headway.api.errors import Response, problem
from headway.errors import Unauthorized

_APP_ADMIN_ACTIONS = frozenset({"feedback", "models", "active"})
_CHALLENGE = b'Bearer realm="headway"'
_INVALID = b', error="invalid_token"'


def is_admin(method: str, parts: list[str]) -> bool:
    """Whether the route (its path split on '/') changes the server's state."""
    if not parts:
        return False
    if parts[0] == "lookups":
        return True  # a flow's lookups hold users' features: reading them is an admin's too
    if parts[0] == "apps":
        if method in ("PUT", "DELETE"):
            return len(parts) == 2
        return method == "POST" and len(parts) == 3 and parts[2] in _APP_ADMIN_ACTIONS
    return (
        parts[0] == "v2"
        and len(parts) == 5
        and parts[1:3] == ["repository", "models"]
        and parts[4] in ("load", "unload")
    )


def is_open(parts: list[str]) -> bool:
    """Whether the route answers without a token even when the server has an inference token:
    the health probes (`/v2/health/live`, `/v2/health/ready`) and the API's description
    (`/openapi.json`, `/docs`), which say nothing of the models."""
    if not parts:
        return False
    if parts[0] == "v2":
        return len(parts) == 3 and parts[1] == "health"
    return parts[0] in ("openapi.json", "docs")


class BearerToken:
    """The secrets that open a set of routes (`for_admin`, `for_inference`), compared in
    constant time: no timing tells how much of a guess matched.

    `allows` is the hot path's check: `Authorization: Bearer <secret>`, as clients send it,
    is one comparison per secret; any other spelling (a lower-case scheme, extra spaces) is
    parsed before it is compared."""

    __slots__ = ("_headers", "_missing", "_secrets", "_wrong")

    def __init__(self, *secrets: str, missing: str, wrong: str) -> None:
        if not secrets or not all(secrets):
            raise ValueError("a token must not be empty")
        self._secrets = tuple(secret.encode() for secret in secrets)
        self._headers = tuple(b"Bearer " + secret for secret in self._secrets)
        self._missing = missing  # what a request without a token is told
        self._wrong = wrong  # and one with a wrong token

    def allows(self, sent: bytes | None) -> bool:
        """Whether `sent`, a request's Authorization value (None: it has none), carries one
        of the secrets."""
        if sent is None:
            return False
        for header in self._headers:
            if hmac.compare_digest(sent, header):
                return True
        scheme, _, credentials = sent.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        credentials = credentials.strip()
        matched = False
        for secret in self._secrets:
            matched |= hmac.compare_digest(credentials, secret)
        return matched

    def refusal(self, sent: bytes | None) -> Response | None:
        """None when `sent` (a request's Authorization value) carries the token; else the 401."""
        if self.allows(sent):
            return None
        status, body, extra = problem(401, self.message(sent), Unauthorized.reason)
        challenge = _CHALLENGE if self._malformed(sent) else _CHALLENGE + _INVALID
        return status, body, [*extra, (b"www-authenticate", challenge)]

    def message(self, sent: bytes | None) -> str:
        """What a refused request is told (REST's `error`, gRPC's UNAUTHENTICATED message)."""
        return self._missing if self._malformed(sent) else self._wrong

    @staticmethod
    def _malformed(sent: bytes | None) -> bool:
        """No bearer token at all (rather than a wrong one)."""
        scheme, _, credentials = (sent or b"").strip().partition(b" ")
        return scheme.lower() != b"bearer" or not credentials.strip()


def for_admin(secret: str | None) -> BearerToken | None:
    """The check of the admin routes, with an admin token (`--admin-token`)."""
    if not secret:
        return None
    return BearerToken(
        secret,
        missing="this route changes the server's state and needs the admin token: "
        "send 'Authorization: Bearer <token>' (the server's --admin-token)",
        wrong="the admin token is not the server's",
    )


def for_inference(secret: str | None, admin: str | None = None) -> BearerToken | None:
    """The check of every route but `is_open` ones, with an inference token
    (`--inference-token`): it, or the admin token, opens them."""
    if not secret:
        return None
    return BearerToken(
        secret,
        *([admin] if admin else []),
        missing="this server needs a token: send 'Authorization: Bearer <token>' (the "
        "server's --inference-token, or its --admin-token)",
        wrong="the token is not one of the server's",
    )


def exposure_warning(host: str, token: str | None, inference: str | None = None) -> str | None:
    """What to warn about when the server listens beyond this machine with open admin routes."""
    if token:
        return None
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        loopback = False
    if loopback:
        return None
    if inference:
        return (
            f"WARNING: listening on {host} with an inference token and no admin token: "
            "whoever holds the inference token can also run code on this server (through flow "
            "applications), load and unload models and replace or delete applications. Set HEADWAY_ADMIN_TOKEN (or --admin-token) to keep "
            "those to administrators (docs/security.md)."
        )
    return (
        f"WARNING: listening on {host}, beyond this machine, without an admin token: anyone "
        "who can reach the port can run code on this server (through flow applications, which "
        "import the Python files of the model repository that they name), load and unload models, "
        "replace or delete applications and send feedback. Set HEADWAY_ADMIN_TOKEN (or "
        "--admin-token), or bind 127.0.0.1 (docs/security.md)."
    )
