"""An answer of Headway's HTTP/1.1 server as the bytes of one write.

`render` is called once per answer on the event loop's thread, so the status lines are built
once per status and the quick refusals (`api.refusals`), which are the same few answers over
and over, once per kind of connection (`rendered_once`).
"""

from __future__ import annotations

from http import HTTPStatus

from headway.api.errors import Response

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_STATUS_LINES: dict[int, bytes] = {}
#: The quick refusals' answers as bytes, by (id of the answer, keep-alive, HTTP/1.0): each
#: answer is one object kept for good by `api.refusals`, so its id stays its own.
_RENDERED: dict[tuple[int, bool, bool], bytes] = {}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        reason = _REASONS.get(status, b"Unknown")
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status, reason)
    return line


def render(response: Response, keep_alive: bool, http10: bool = False) -> bytes:
    """One HTTP/1.1 response, head and body, as bytes for a single write."""
    status, body, headers = response
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


def rendered_once(response: Response, keep_alive: bool, http10: bool) -> bytes:
    """`render` of an answer that is kept for good and given again and again (a quick
    refusal), rendered once per kind of connection."""
    key = (id(response), keep_alive, http10)
    data = _RENDERED.get(key)
    if data is None:
        data = _RENDERED[key] = render(response, keep_alive, http10)
    return data
