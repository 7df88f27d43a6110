"""A slow, steady prober: one keep-alive connection, one request every ``--interval`` seconds
(or as soon as the previous answer arrives, if that took longer), for ``--seconds``.

Started as its own process by the overload scenario, so the load generator's busy event loop
does not delay it. Prints one JSON object: ``[[sent, latency_s, status], ...]`` with ``sent`` on
``time.monotonic()`` (CLOCK_MONOTONIC, the same clock as the load generator's perf_counter).
Status 0 means no answer (connection error or timeout).

    python probe.py --host 127.0.0.1 --port 8000 --path /v2/models/lr/infer --body body.json
"""

from __future__ import annotations

import argparse
import http.client
import sys
import time

import orjson


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--body", required=True, help="file holding the request body")
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    body = open(args.body, "rb").read()  # noqa: SIM115 - read once, closed at exit
    headers = {"Content-Type": "application/json"}
    samples: list[tuple[float, float, int]] = []
    conn: http.client.HTTPConnection | None = None
    start = time.monotonic()
    due = start
    while due < start + args.seconds:
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        sent = time.monotonic()
        status = 0
        try:
            if conn is None:
                conn = http.client.HTTPConnection(args.host, args.port, timeout=args.timeout)
            conn.request("POST", args.path, body, headers)
            response = conn.getresponse()
            response.read()
            status = response.status
            if response.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException):
            if conn is not None:
                conn.close()
            conn = None
        samples.append((sent, time.monotonic() - sent, status))
        due = max(due + args.interval, time.monotonic())
    sys.stdout.write(orjson.dumps(samples).decode())


if __name__ == "__main__":
    main()
