"""An answer of Headway's HTTP/1.1 server as the bytes of one write.

`render` is called once per answer on the event loop's thread, so the status lines are built
once per status (the quick refusals of `api.refusals`, the same few answers over and over, are
rendered once and kept there).
"""

from __future__ import annotations

from http import HTTPStatus

from headway.api.errors import JSON, Headers, Response

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_STATUS_LINES: dict[int, bytes] = {}
#: A JSON answer's head but its length, by (status, keep-alive, HTTP/1.0): its status line, its
#: content type; and what follows the length (the connection header, the blank line).
_JSON_HEADS: dict[tuple[int, bool, bool], tuple[bytes, bytes]] = {}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        reason = _REASONS.get(status, b"Unknown")
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status, reason)
    return line


def render(response: Response, keep_alive: bool, http10: bool = False) -> bytes:
    """One HTTP/1.1 response, head and body, as bytes for a single write."""
    status, body, headers = response
    if headers is JSON:  # most answers: their head but the length is built once
        key = (status, keep_alive, http10)
        head = _JSON_HEADS.get(key) or _json_head(key)
        return b"%scontent-length: %d\r\n%s%s" % (head[0], len(body), head[1], body)
    parts = [_STATUS_LINES.get(status) or status_line(status)]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"content-length: %d\r\n" % len(body))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    elif http10:
        parts.append(b"connection: keep-alive\r\n")
    parts += (b"\r\n", body)
    return b"".join(parts)


def _json_head(key: tuple[int, bool, bool]) -> tuple[bytes, bytes]:
    """`render`'s head of a JSON answer, split around its length, made once per kind."""
    whole = render((key[0], b"", list(JSON)), key[1], key[2])
    before, _, after = whole.partition(b"content-length: 0\r\n")
    head = _JSON_HEADS[key] = before, after
    return head


def stream_head(status: int, headers: Headers, chunked: bool) -> bytes:
    """The head of a streamed answer (`api.sse`): chunked on a kept connection, else its body
    runs until the connection closes."""
    parts = [_STATUS_LINES.get(status) or status_line(status)]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"transfer-encoding: chunked\r\n" if chunked else b"connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
