"""How every Ray Serve peer runs (`ray/`, `ray_cascade/`, `ray_stream/`): a local Ray in this
process (2 CPUs, no dashboard, its workers' output kept out of the driver's), Serve's HTTP on
``127.0.0.1:<port>`` without per-request log lines, the application deployed, ``ready``
printed, and then served until SIGINT/SIGTERM, when Serve and Ray are shut down (the harness
also stops every process left in its group).

The apps import this with ``bench/peers`` on their PYTHONPATH; it needs Ray only.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import ray
from ray import serve


def serve_until_stopped(
    app: Any, *, port: int, temp_dir: str | None, name: str = "bench", route_prefix: str = "/"
) -> None:
    """Start Ray and Serve, run the application `app` (`Deployment.bind()`) as `name` at
    `route_prefix`, and serve until a signal to stop."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp_dir, log_to_driver=False)
    try:
        quiet = {"enable_access_log": False, "log_level": "WARNING"}  # no per-request log lines
        serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config=quiet)
        serve.run(app, name=name, route_prefix=route_prefix, logging_config=quiet)
        print("ready", flush=True)
        stop.wait()
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
