"""How long a connection's latest bytes waited in the kernel before the server read them.

A request's deadline counts from when its bytes arrived. The event loop's turns bound that wait
for a connection already being read (`HttpServer.arrived_since`), but not for a new one: it
waits in the listen queue, its request already received, until the loop accepts it, and
under overload that is where requests go stale. Linux reports, per TCP socket, the time since
data was last received (`TCP_INFO`'s `tcpi_last_data_recv`, in milliseconds of kernel ticks).
"""

from __future__ import annotations

import socket
import struct
from typing import Any

#: Where `tcpi_last_data_recv` (a u32, milliseconds) sits in Linux's `struct tcp_info`: after
#: eight u8 fields and eleven u32s.
_LAST_DATA_RECV = struct.Struct("=I")
_OFFSET = 8 + 11 * 4
#: The kernel counts in ticks (1-10 ms): a wait is counted only beyond one tick at HZ 100, so
#: a request is never made older than it is.
TICK_S = 0.010


def waited_in_kernel(sock: Any) -> float:
    """Seconds (0.0 when unknown or within a tick) since `sock`'s last bytes arrived."""
    option = getattr(socket, "TCP_INFO", None)
    if sock is None or option is None:
        return 0.0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, option, _OFFSET + _LAST_DATA_RECV.size)
    except (OSError, AttributeError, TypeError):
        return 0.0
    if len(info) < _OFFSET + _LAST_DATA_RECV.size:
        return 0.0
    milliseconds: int = _LAST_DATA_RECV.unpack_from(info, _OFFSET)[0]
    return max(0.0, milliseconds / 1000.0 - TICK_S)
