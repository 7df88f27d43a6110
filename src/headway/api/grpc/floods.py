"""What an HTTP/2 client may send only so often, counted per connection per window.

Each attack on HTTP/2 servers of the last years used frames the protocol allows, each cheap to
send and each costing the server work: streams opened and reset at once (CVE-2023-44487,
"rapid reset"), streams that provoke a reset (CVE-2019-9514), PINGs and SETTINGS that are
each answered (CVE-2019-9512, CVE-2019-9515), frames that carry nothing (CVE-2019-9518,
and the empty CONTINUATION frames of CVE-2024-27316). A connection counts them in windows of
`WINDOW_S` seconds (`Limits` holds the bounds); past a bound it is answered GOAWAY
ENHANCE_YOUR_CALM and closed (`api.grpc.http2`). A window restarts on the first read after
it ends: no clock is read per frame, and a count is an integer add (the streams opened in a
window are the connection's count less its count when the window began).
"""

from __future__ import annotations

#: Seconds in which the counts below add up before they restart.
WINDOW_S = 10.0


class Floods:
    """One connection's counts in the current window."""

    __slots__ = ("empty", "opened", "pings", "resets", "settings")

    def __init__(self) -> None:
        #: The streams the connection had opened when the window began.
        self.opened = 0
        #: Streams reset: by the client (RST_STREAM), or by this side for a stream error or
        #: a stream over the concurrency limit (REFUSED_STREAM).
        self.resets = 0
        self.pings = 0
        self.settings = 0
        #: Frames that carry nothing: empty DATA, HEADERS and CONTINUATION that end nothing,
        #: PRIORITY (ignored here) and frames of unknown types.
        self.empty = 0

    def restart(self, opened: int) -> None:
        self.opened = opened
        self.resets = self.pings = self.settings = self.empty = 0
