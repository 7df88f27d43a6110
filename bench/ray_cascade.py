"""The cascade on Headway (a flow app) and on Ray Serve (deployment handles), side by side.

Called by `bench/flows.py --ray`: starts the Ray Serve app of `peers/ray_cascade/` in its venv
(created on first use), checks that it answers every query as the flow does, then alternates
closed-loop rounds at 32 connections on both.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from bench.peers.common import Server, ensure_venv

from headway.launcher import free_port

BENCH = Path(__file__).resolve().parent


def compare(headway_url: str, repository: Path, args: Any, rounds: Any, closed: Any,
            payloads: list[bytes], row: Any) -> dict[str, Any]:  # fmt: skip
    work = BENCH / ".work" / "flows"
    python = ensure_venv("ray_cascade", work / "ray-venv.log")
    port = free_port()
    temp = Path("/tmp") / f"hwflows-ray-{port}"
    server = Server(
        "ray-cascade",
        [str(python), str(BENCH / "peers" / "ray_cascade" / "app.py"), "--repository",
         str(repository), "--port", str(port), "--temp-dir", str(temp)],
        f"http://127.0.0.1:{port}/apps/cascade/predict", work / "ray.log",
    )  # fmt: skip
    server.start(timeout=300)
    try:
        ray_url = f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=60) as client:
            for payload in payloads:  # answers checked equal first
                ours = client.post(f"{headway_url}/apps/cascade/predict", content=payload)
                theirs = client.post(f"{ray_url}/apps/cascade/predict", content=payload)
                assert ours.status_code == theirs.status_code == 200, (ours.text, theirs.text)
                a, b = ours.json()["output"], theirs.json()["output"]
                assert [(r["label"], r["model"]) for r in a] == [
                    (r["label"], r["model"]) for r in b
                ]
                assert all(
                    abs(x["confidence"] - y["confidence"]) < 1e-9 for x, y in zip(a, b, strict=True)
                )
        urls = {"headway": headway_url, "ray": ray_url}
        runs = rounds(args.rounds, ["headway", "ray"],
                      lambda system, _: closed(urls[system], "cascade", 32, args.duration))  # fmt: skip
    finally:
        server.stop()
        time.sleep(1.0)
    return runs
