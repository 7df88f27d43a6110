"""Browsers on the routes that change state: cross-site requests and DNS rebinding refused.

Any web page a developer opens can make the browser send requests to any address, a server on
the developer's own loopback included. It cannot read the answers of another origin, but the
request is sent: a form or a `fetch` with a `text/plain` body (a CORS "simple request", sent
without asking the server first) could unload a model or name a flow to run. And a page whose
name the attacker re-points at 127.0.0.1 (DNS rebinding) is of the same origin as the server,
so the browser lets it read the answers too. So the routes that change state (`api.auth`'s
`is_admin`) take, from a browser, only what a page of this server's own origin would send:

- `Origin`, when present (browsers send it on every cross-origin request and on every POST,
  PUT and DELETE), must be this server's own (`scheme://` + the `Host` it was sent to) or one
  the operator allows (`--allow-origin`); else 403. `null` (a sandboxed frame, a `file:` page)
  is no exception.
- A body must be JSON (`application/json`, or no `Content-Type`, as tritonclient sends its
  load and unload bodies): `text/plain`, form and multipart bodies, the ones a page may send
  anywhere without a CORS preflight, answer 415 (browsers that send no `Origin` on a form's POST
  still cannot reach these routes).
- On a loopback bind, `Host` must be a loopback name (`localhost`, `*.localhost`, `127.x.x.x`,
  `[::1]`, any port) or one the operator allows (`--allow-host`); else 403. That is what stops
  DNS rebinding, whose requests carry the attacker's name.

Clients that are not browsers (curl, httpx, tritonclient, `headway.Client`) send no `Origin`
and are not affected. An allowed origin also gets CORS: a preflight (`OPTIONS` with
`Access-Control-Request-Method`) is answered 204 with the methods and the headers it asked
for, and every answer to a request from it carries `Access-Control-Allow-Origin`
(docs/protocol.md).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from headway.api.errors import Headers, Reply, Response, problem
from headway.errors import ConfigError

#: Methods a preflight may ask for: those of the routes.
ALLOWED_METHODS = b"GET, POST, PUT, DELETE"
#: Seconds a browser may cache a preflight's answer (Starlette's CORSMiddleware: 600; browsers
#: cap it at 2 hours, Chromium, or a day, Firefox).
PREFLIGHT_MAX_AGE_S = 600
#: Any origin (`--allow-origin '*'`).
ANY = "*"

_ORIGIN = re.compile(r"^[a-z][a-z0-9+.\-]*://[^/?#\s]+$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


def is_loopback_bind(host: str) -> bool:
    """Whether a listening address reaches only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def host_name(host: bytes) -> str:
    """The name in a `Host` header, lower-case, without its port (`[::1]:8000` -> `::1`)."""
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1 : text.find("]")] if "]" in text else text
    name, colon, port = text.rpartition(":")
    return name if colon and port.isdigit() else text


def is_loopback_name(name: str) -> bool:
    """Whether a `Host` name can only mean this machine: `localhost` and `*.localhost` (RFC
    6761; browsers resolve them to loopback themselves), a 127.x.x.x or ::1 literal."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    if _IPV4.match(name) or ":" in name:
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False
    return False


def parse_origins(values: Iterable[str]) -> frozenset[str]:
    """`--allow-origin` values (each may hold several, comma-separated) as normalised origins:
    `scheme://host[:port]` lower-case, `null`, or `*`; ConfigError for anything else."""
    found: set[str] = set()
    for value in values:
        for item in value.split(","):
            origin = item.strip().lower().rstrip("/")
            if not origin:
                continue
            if origin not in (ANY, "null") and not _ORIGIN.match(origin):
                raise ConfigError(
                    f"--allow-origin {item.strip()!r} is not an origin: give "
                    "scheme://host[:port] as a browser sends it (e.g. https://tools.example.com "
                    "or http://localhost:3000, no path), 'null', or '*'"
                )
            found.add(origin)
    return frozenset(found)


def parse_hosts(values: Iterable[str]) -> frozenset[str]:
    """`--allow-host` values (comma-separated too) as lower-case names without a port."""
    found: set[str] = set()
    for value in values:
        for item in value.split(","):
            if item.strip():
                found.add(host_name(item.strip().encode("latin-1")))
    return frozenset(found)


def origins_warning(origins: Iterable[str]) -> str | None:
    """What to warn about at start: `*` lets every web page change the server."""
    if ANY not in set(origins):
        return None
    return (
        "WARNING: --allow-origin '*': any web page that a browser on a machine that reaches "
        "this server opens may load and unload models, replace applications and name flow "
        "code to run, unless HEADWAY_ADMIN_TOKEN is set. Name the origins you trust instead "
        "(docs/protocol.md)."
    )


class OriginPolicy:
    """Which browser requests the routes that change state accept (the module's rules).

    `loopback`: the server listens on loopback only, so `Host` is checked; `allowed`: origins
    (`parse_origins`) whose pages may call those routes and read every answer (CORS);
    `hosts`: more names than the loopback ones that `Host` may carry."""

    __slots__ = ("allowed", "cors", "hosts", "loopback")

    def __init__(
        self,
        *,
        loopback: bool = True,
        allowed: Iterable[str] = (),
        hosts: Iterable[str] = (),
    ) -> None:
        self.loopback = loopback
        self.allowed = parse_origins(allowed)
        self.hosts = parse_hosts(hosts)
        #: Whether answers may need CORS headers (any origin allowed): else `respond` skips it.
        self.cors = bool(self.allowed)

    @classmethod
    def for_bind(
        cls, host: str, allowed: Iterable[str] = (), hosts: Iterable[str] = ()
    ) -> OriginPolicy:
        return cls(loopback=is_loopback_bind(host), allowed=allowed, hosts=hosts)

    # -- the routes that change state ----------------------------------------------------------
    def refusal(self, method: str, headers: dict[bytes, bytes]) -> Response | None:
        """None when a request to a route that changes state may proceed; else its 403/415."""
        host = headers.get(b"host")
        if self.loopback and host is not None:
            name = host_name(host)
            if not is_loopback_name(name) and name not in self.hosts:
                return problem(
                    403,
                    f"this server listens on loopback, and this request that would change its "
                    f"state is addressed to host {name!r} (its Host header), which is how a web "
                    "page re-pointing its own name at 127.0.0.1 (DNS rebinding) reaches it: "
                    "address the server as localhost or 127.0.0.1, or, behind a proxy that "
                    f"sends that name, start it with --allow-host {name} (HEADWAY_ALLOW_HOST)",
                )
        origin = headers.get(b"origin")
        if origin is not None and not self._accepts(origin, host):
            shown = origin.decode("latin-1")
            return problem(
                403,
                f"cross-origin request refused: this route changes the server's state and the "
                f"request comes from a web page of origin {shown!r} (its Origin header), not "
                "from this server; to let pages of that origin call it, start the server with "
                f"--allow-origin {shown} (HEADWAY_ALLOW_ORIGIN)",
            )
        kind = headers.get(b"content-type")
        if kind is not None and method not in ("GET", "HEAD") and not _json(kind):
            shown = kind.decode("latin-1")
            return problem(
                415,
                f"this route changes the server's state and takes a JSON body: send "
                f"'Content-Type: application/json', not {shown!r} (curl: --json, or -H "
                "'Content-Type: application/json'); text/plain, form and multipart bodies are "
                "what any web page can make a browser send, so they are refused here",
            )
        return None

    def _accepts(self, origin: bytes, host: bytes | None) -> bool:
        text = origin.decode("latin-1").strip().lower()
        if text in self.allowed or ANY in self.allowed:
            return True
        _, sep, authority = text.partition("://")
        return bool(sep) and host is not None and authority == host.decode("latin-1").lower()

    # -- CORS for allowed origins --------------------------------------------------------------
    def preflight(self, headers: dict[bytes, bytes]) -> Response:
        """The answer to a CORS preflight: 204 with what an allowed origin may send, else 403."""
        origin = headers.get(b"origin", b"")
        if not self._allowed(origin):
            shown = origin.decode("latin-1")
            return problem(
                403,
                f"cross-origin requests from {shown!r} are not allowed; to let pages of that "
                f"origin call this server, start it with --allow-origin {shown} "
                "(HEADWAY_ALLOW_ORIGIN)",
            )
        extra: Headers = [
            (_ALLOW_ORIGIN, origin),
            (b"access-control-allow-methods", ALLOWED_METHODS),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode()),
            _VARY,
        ]
        asked = headers.get(b"access-control-request-headers")
        if asked:
            extra.append((b"access-control-allow-headers", asked))
        return 204, b"", extra

    def _allowed(self, origin: bytes) -> bool:
        return bool(origin) and (
            ANY in self.allowed or origin.decode("latin-1").strip().lower() in self.allowed
        )

    def answering(self, headers: dict[bytes, bytes], reply: Reply) -> Reply:
        """`reply`, adding `Access-Control-Allow-Origin` when the request's origin is allowed
        (so its page may read the answer); `reply` itself otherwise."""
        origin = headers.get(b"origin")
        if origin is None or not self._allowed(origin):
            return reply

        def with_cors(response: Response) -> None:
            status, body, extra = response
            if not any(name == _ALLOW_ORIGIN for name, _ in extra):  # a preflight has it
                extra = [*extra, (_ALLOW_ORIGIN, origin), _VARY]
            reply((status, body, extra))

        return with_cors


_ALLOW_ORIGIN = b"access-control-allow-origin"
_VARY = (b"vary", b"origin")


def _json(content_type: bytes) -> bool:
    """Whether a Content-Type is JSON: `application/json` or `application/*+json`."""
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )
