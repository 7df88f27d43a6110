"""The cascade on Headway (a flow app) and on its peers' composition, side by side.

Called by `bench/flows.py --ray`: starts the same pipeline composed with Ray Serve deployment
handles (`peers/ray_cascade/`) and with BentoML's `bentoml.depends` (`peers/bentoml_cascade/`),
each in its venv (created on first use); checks that each answers every query as the flow
does; then alternates closed-loop rounds at 32 connections on every system that started. A
peer that cannot be installed or started is left out, with the reason (its error) recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from bench.peers.common import Server, SetupError, ensure_venv

from headway.launcher import free_port

BENCH = Path(__file__).resolve().parent
WORK = BENCH / ".work" / "flows"
PREDICT = "/apps/cascade/predict"


def ray_server(repository: Path, port: int) -> Server:
    python = ensure_venv("ray_cascade", WORK / "ray-venv.log")
    temp = Path("/tmp") / f"hwflows-ray-{port}"
    return Server(
        "ray-cascade",
        [str(python), str(BENCH / "peers" / "ray_cascade" / "app.py"), "--repository",
         str(repository), "--port", str(port), "--temp-dir", str(temp)],
        f"http://127.0.0.1:{port}{PREDICT}", WORK / "ray.log",
        env={"PYTHONPATH": str(BENCH / "peers")},  # the app imports ray_peer
    )  # fmt: skip


def bentoml_server(repository: Path, port: int) -> Server:
    python = ensure_venv("bentoml_cascade", WORK / "bentoml-venv.log")
    return Server(
        "bentoml-cascade",
        [str(python.with_name("bentoml")), "serve", "service:Cascade", "--host", "127.0.0.1",
         "--port", str(port)],
        f"http://127.0.0.1:{port}/readyz", WORK / "bentoml.log",
        env={"BENCH_REPOSITORY": str(repository), "BENTOML_DO_NOT_TRACK": "true",
             "BENTOML_HOME": str(WORK / "bentoml-home")},
        cwd=BENCH / "peers" / "bentoml_cascade",
    )  # fmt: skip


PEERS: dict[str, Callable[[Path, int], Server]] = {"ray": ray_server, "bentoml": bentoml_server}


def check(headway_url: str, peer_url: str, payloads: list[bytes]) -> None:
    """The peer answers every query as the flow does: label, model, confidence to 1e-9."""
    with httpx.Client(timeout=60) as client:
        for payload in payloads:
            ours = client.post(f"{headway_url}{PREDICT}", content=payload)
            theirs = client.post(
                f"{peer_url}{PREDICT}", content=payload,
                headers={"content-type": "application/json"},
            )  # fmt: skip
            assert ours.status_code == theirs.status_code == 200, (ours.text, theirs.text)
            a, b = ours.json()["output"], theirs.json()["output"]
            assert [(r["label"], r["model"]) for r in a] == [(r["label"], r["model"]) for r in b]
            assert all(
                abs(x["confidence"] - y["confidence"]) < 1e-9 for x, y in zip(a, b, strict=True)
            )


def compare(headway_url: str, repository: Path, args: Any, rounds: Any, closed: Any,
            payloads: list[bytes]) -> dict[str, Any]:  # fmt: skip
    """{"runs": {system: [figures per round]}, "skipped": {peer: why}}."""
    servers: dict[str, Server] = {}
    skipped: dict[str, str] = {}
    urls = {"headway": headway_url}
    try:
        for name, make in PEERS.items():
            port = free_port()
            try:
                servers[name] = make(repository, port).start(timeout=300)
            except SetupError as exc:
                skipped[name] = str(exc)
                print(f"{name} left out: {exc}", flush=True)
                continue
            urls[name] = f"http://127.0.0.1:{port}"
            check(headway_url, urls[name], payloads)  # answers checked equal first
            print(f"{name}: answers checked equal to Headway's", flush=True)
        runs = rounds(args.rounds, list(urls),
                      lambda system, _: closed(urls[system], "cascade", 32, args.duration))  # fmt: skip
    finally:
        for server in servers.values():
            server.stop()
        time.sleep(1.0)
    return {"runs": runs, "skipped": skipped}
