"""The admin token: which routes change what the server serves, and who may call them.

With a token configured (`--admin-token`, `HEADWAY_ADMIN_TOKEN`) the admin routes (`is_admin`;
docs/security.md lists them) need `Authorization: Bearer <token>`, else 401 with a
`WWW-Authenticate` header (RFC 6750). Inference, metadata, health and metrics stay open, as in
Triton.
"""

from __future__ import annotations

import hmac
import ipaddress

from headway.api.errors import Response, problem

_APP_ADMIN_ACTIONS = frozenset({"feedback", "models", "active"})
_CHALLENGE = b'Bearer realm="headway"'


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


class AdminToken:
    """A shared secret compared in constant time (no timing tells how much of a guess matched)."""

    __slots__ = ("_expected",)

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an admin token must not be empty")
        self._expected = token.encode()

    def refusal(self, headers: dict[bytes, bytes]) -> Response | None:
        """None when `headers` carry the token; else the 401 to answer."""
        scheme, _, credentials = headers.get(b"authorization", b"").strip().partition(b" ")
        if scheme.lower() != b"bearer" or not credentials.strip():
            status, body, extra = problem(
                401,
                "this route changes the server's state and needs the admin token: "
                "send 'Authorization: Bearer <token>' (the server's --admin-token)",
            )
            return status, body, [*extra, (b"www-authenticate", _CHALLENGE)]
        if not hmac.compare_digest(credentials.strip(), self._expected):
            status, body, extra = problem(401, "the admin token is not the server's")
            return (
                status,
                body,
                [*extra, (b"www-authenticate", _CHALLENGE + b', error="invalid_token"')],
            )
        return None


def exposure_warning(host: str, token: str | None) -> str | None:
    """What to warn about when the server listens beyond this machine with open admin routes."""
    if token:
        return None
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        loopback = False
    if loopback:
        return None
    return (
        f"WARNING: listening on {host}, beyond this machine, without an admin token: anyone "
        "who can reach the port can load and unload models, replace or delete applications "
        "and send feedback. Set HEADWAY_ADMIN_TOKEN (or --admin-token), or bind 127.0.0.1 "
        "(docs/security.md)."
    )
