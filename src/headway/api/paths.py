"""A request's path as the routes read it: segments split on '/', then percent-decoded.

Splitting first and decoding each segment after is what keeps a proxy's path rules in force:
`/v2%2Frepository%2Fmodels%2Fm%2Funload` is one segment holding slashes (a name no route has),
not the unload route that a rule on `/v2/repository/` would have refused. An empty segment
(`//`, a trailing `/`) matches no route either, and `.` and `..` are names like any other:
nothing is normalised here that a proxy in front may have matched differently. Every HTTP
server hands the app the raw path (`api.connection`, `api.asgi`, `api.rsgi`); this module is the
one place that decodes it.
"""

from __future__ import annotations

from urllib.parse import unquote


def segments(path: str) -> list[str]:
    """The segments of a raw path (as sent, percent-encoded, without the query), decoded one
    by one; empty ones are kept (see `empty_segment`). `/` has none."""
    parts = path.split("/")
    if parts[0] == "":  # the leading slash of an origin-form path
        del parts[0]
    if parts == [""]:  # the root, "/"
        return []
    if "%" in path:
        return [unquote(part, errors="replace") if "%" in part else part for part in parts]
    return parts


def empty_segment(parts: list[str]) -> bool:
    """Whether the path had an empty segment (`//` or a trailing `/`): no route matches it."""
    return "" in parts


def from_decoded(path: str) -> str:
    """A path that a server has already percent-decoded (granian's RSGI scope), as a raw one
    that `segments` decodes back to it, not a second time: its `%` escaped again. What was
    sent as `%2F` cannot be told from `/` any more (docs/protocol.md says so)."""
    return path.replace("%", "%25") if "%" in path else path
