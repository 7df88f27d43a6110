"""Building and running a server from settings: shared by `headway serve`, the demo and tests."""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import uvicorn

from headway.api import tracing
from headway.api.app import HeadwayApp
from headway.api.asgi import AsgiApp
from headway.api.auth import exposure_warning
from headway.api.dashboard.history import HISTORY_SECONDS
from headway.api.grpc.calls import Limits as GrpcLimits
from headway.api.http import REPLY_POLL_S, HttpServer
from headway.api.limits import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MAX_CONNECTIONS,
    STREAM_BUFFER_BYTES,
    STREAM_IDLE_TIMEOUT_S,
    WRITE_TIMEOUT_S,
    connection_cap,
    max_answer_bytes,
)
from headway.api.origins import OriginPolicy, origins_warning
from headway.api.rsgi import GranianServer
from headway.api.text import MAX_PROMPT_BYTES
from headway.api.tls import ServerTls, server_tls, standard_ciphers
from headway.apps import AppRegistry, load_config
from headway.control.controller import Controller
from headway.control.policy import POLICIES
from headway.errors import ConfigError
from headway.planning.applying import PlanInForce, serve_plan
from headway.planning.description import DEFAULT_CATALOGUE, load_planning, read_document
from headway.planning.live import LiveTuner
from headway.planning.plan_file import read_plan
from headway.planning.tuner import HOLD_DOWN as TUNER_HOLD_DOWN
from headway.planning.tuner import MAX_REPLICAS as TUNER_MAX_REPLICAS
from headway.planning.tuner import TRAILING as TUNER_TRAILING
from headway.repository import Repository
from headway.resources import local_gpus
from headway.runtime.engines.inline import LOOP, InlineEngine
from headway.runtime.engines.local import LocalEngine
from headway.runtime.worker import FRAMEWORKS_ENV, SPIN_ENV
from headway.store import Store

log = logging.getLogger("headway.serve")

#: Allocations (net) between young-generation collections in the frontend (Python's: 700).
GC_YOUNG_THRESHOLD = 20_000
#: The gRPC server's own defaults (`api.grpc.calls.Limits`), as flags show them.
GRPC_IDLE_TIMEOUT_S = GrpcLimits.idle_timeout
GRPC_MAX_BUFFERED_MB = GrpcLimits.server_buffer / 2**20


@dataclass(frozen=True, kw_only=True)
class ServeSettings:
    """Everything `headway serve` takes; each flag maps to one field (env: HEADWAY_<FLAG>)."""

    repository: Path
    host: str = "127.0.0.1"
    port: int = 8000
    grpc_port: int = 8001
    workers: int = max(1, (os.cpu_count() or 2) - 1)
    state: Path = Path(".headway/state.db")
    max_body_mb: float = 64.0
    endpoint: str | None = None
    log_level: str = "warning"
    config: Path | None = None
    memory_budget_mb: float | None = None
    scheduler: str = "headway"
    http: str = "native"
    engine: str = "local"
    inline_runs: str = LOOP
    ray_address: str | None = None
    schedule_ahead_ms: float = 0.0
    busy_poll_us: float = 0.0
    plan: Path | None = None
    tune: bool = False
    tune_max_replicas: int = TUNER_MAX_REPLICAS
    tune_hold_down_s: float = TUNER_HOLD_DOWN
    tune_trailing_s: float = TUNER_TRAILING
    admin_token: str | None = None
    state_sync: str = "normal"
    header_timeout: float = HEADER_TIMEOUT_S
    body_timeout: float = BODY_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    write_timeout: float = WRITE_TIMEOUT_S
    grpc_idle_timeout: float = GRPC_IDLE_TIMEOUT_S
    grpc_max_buffered_mb: float = GRPC_MAX_BUFFERED_MB
    tls_cert: Path | None = None
    tls_key: Path | None = None
    inference_token: str | None = None
    allow_origin: tuple[str, ...] = ()
    allow_host: tuple[str, ...] = ()
    max_answer_mb: float | None = None
    max_unread_mb: float | None = None
    dashboard_history_s: int = HISTORY_SECONDS
    stream_buffer_mb: float = STREAM_BUFFER_BYTES / 2**20
    stream_idle_timeout: float = STREAM_IDLE_TIMEOUT_S
    max_prompt_kb: float = MAX_PROMPT_BYTES / 1024


def build_app(settings: ServeSettings) -> HeadwayApp:
    tls = server_tls(settings.tls_cert, settings.tls_key)  # a bad file fails before anything
    # With a memory budget, models load on demand: index the folder now, read each model.yaml
    # the first time it is asked for.
    repository = Repository.scan(settings.repository, lazy=settings.memory_budget_mb is not None)
    workers = settings.workers
    plan = read_plan(settings.plan) if settings.plan is not None else None
    if settings.tune and plan is None:
        raise ConfigError("--tune needs --plan: the tuner follows a plan's traffic envelope")
    in_force: PlanInForce | None = None
    if plan is not None:  # each planned replica is a worker process of its own
        catalogue = load_planning(settings.config)[0] if settings.config else DEFAULT_CATALOGUE
        in_force = serve_plan(plan, repository, catalogue, gpus=local_gpus())
        workers = in_force.workers
        for problem in in_force.problems():
            log.warning("plan %s: %s", settings.plan, problem)
    # a bad config file fails here, before any worker starts, with the app and key named
    declared = load_config(settings.config, repository) if settings.config else {}
    env = worker_env(settings, repository)
    engine: LocalEngine | InlineEngine
    if settings.ray_address is not None and settings.engine != "ray":
        raise ConfigError("--ray-address needs --engine ray")
    if settings.engine == "inline":
        engine = InlineEngine(env=env, runs=settings.inline_runs)
    elif settings.engine == "ray":
        engine = ray_engine(settings, repository, env)
    else:
        engine = LocalEngine(workers, endpoint=settings.endpoint, env=env)
    store = Store(settings.state, sync=settings.state_sync)
    controller = Controller(
        repository,
        engine,
        store=store,
        memory_budget_mb=settings.memory_budget_mb,
        policy=replace(
            POLICIES[settings.scheduler], schedule_ahead=settings.schedule_ahead_ms / 1000.0
        ),
    )
    folder = settings.config.parent if settings.config else None
    apps = AppRegistry(controller, store, declared, config_folder=folder)
    if in_force is not None:  # GET /apps/{app} shows the plan in force
        apps.plans[in_force.plan.app] = in_force.describe()
        apps.planned.update(in_force.flow_stages())
    max_body = int(settings.max_body_mb * 2**20)
    app = HeadwayApp(
        controller,
        max_body_bytes=max_body,
        max_answer_bytes=max_answer_bytes(max_body, settings.max_answer_mb),
        apps=apps,
        admin_token=settings.admin_token,
        inference_token=settings.inference_token,
        tracing=tracing.from_environment(),
        origins=OriginPolicy.for_bind(settings.host, settings.allow_origin, settings.allow_host),
        history_seconds=settings.dashboard_history_s,
        max_prompt_bytes=int(settings.max_prompt_kb * 1024),
    )
    if settings.plan is not None:  # the dashboard shows the plan the server follows
        app.dashboard.plan = read_document(settings.plan)
    if settings.grpc_port:
        from headway.api.grpc.server import GrpcServer

        app.companions.append(
            GrpcServer(
                app,
                host=settings.host,
                port=settings.grpc_port,
                header_timeout=settings.header_timeout,
                body_timeout=settings.body_timeout,
                max_connections=connection_cap(settings.max_connections),
                write_timeout=settings.write_timeout,
                idle_timeout=settings.grpc_idle_timeout,
                stream_idle_timeout=settings.stream_idle_timeout,
                max_buffered=int(settings.grpc_max_buffered_mb * 2**20),
                tls=tls.grpc if tls else None,
            )
        )
    if settings.tune and plan is not None:
        app.tuner = LiveTuner(
            controller,
            plan,
            max_replicas=settings.tune_max_replicas,
            hold_down=settings.tune_hold_down_s,
            trailing=settings.tune_trailing_s,
        )
        app.companions.append(app.tuner)
    return app


def worker_env(settings: ServeSettings, repository: Repository) -> dict[str, str]:
    """What the workers' environment adds: the frameworks to import up front (a first import
    inside a LOAD would hold up that worker's requests and inflate the model's LOAD estimate),
    and, with `--busy-poll-us`, how long to poll for the next action, as the frontend does."""
    env = {FRAMEWORKS_ENV: ",".join(repository.frameworks())}
    if settings.busy_poll_us > 0:
        env[SPIN_ENV] = str(settings.busy_poll_us)
    return env


def ray_engine(settings: ServeSettings, repository: Repository, env: dict[str, str]) -> LocalEngine:
    """Workers as Ray actors (imports Ray: only for `--engine ray`). A Ray instance that
    Headway starts itself gets the logical CPUs its workers ask for, at least the machine's."""
    try:
        from headway.runtime.engines.ray_engine import RayEngine
    except ImportError as exc:
        raise ConfigError(
            f"--engine ray needs Ray: python -m pip install 'headway[ray]' ({exc})"
        ) from None
    pool = settings.memory_budget_mb is not None
    wanted = (
        settings.workers
        if pool
        else sum(c.replicas * c.resources.cpus for c in repository.models.values())
    )
    return RayEngine(
        settings.workers,
        address=settings.ray_address,
        pool=pool,
        num_cpus=math.ceil(max(os.cpu_count() or 1, wanted)),
        endpoint=settings.endpoint,
        env=env,
    )


def uvicorn_config(
    app: HeadwayApp, settings: ServeSettings, tls: ServerTls | None = None
) -> uvicorn.Config:
    return uvicorn.Config(
        AsgiApp(
            app,
            stream_buffer=int(settings.stream_buffer_mb * 2**20),
            stream_idle_timeout=settings.stream_idle_timeout,
        ),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level=settings.log_level,
        timeout_keep_alive=30,
        # uvicorn answers 503 past this many connections and tasks; it has no read timeouts
        limit_concurrency=connection_cap(settings.max_connections),
        # its own TLS context over the same files, with the standard library's ciphers; its
        # handshakes are asyncio's, neither counted nor timed by Headway (docs/operations.md)
        ssl_certfile=tls.cert if tls else None,
        ssl_keyfile=tls.key if tls else None,
        ssl_ciphers=standard_ciphers(),
    )


def run(settings: ServeSettings) -> None:
    """Serve until interrupted (blocks)."""
    if settings.busy_poll_us > 0 and settings.http != "native":
        raise ConfigError("--busy-poll-us needs Headway's own HTTP server (--http native)")
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    tls = server_tls(settings.tls_cert, settings.tls_key)
    for warning in (
        exposure_warning(settings.host, settings.admin_token, settings.inference_token),
        origins_warning(settings.allow_origin),
    ):
        if warning:
            print(warning, file=sys.stderr, flush=True)
    app = build_app(settings)
    if settings.http == "uvicorn":
        uvicorn.Server(uvicorn_config(app, settings, tls)).run()
        return
    server: HttpServer | GranianServer
    if settings.http == "granian":
        server = GranianServer(
            app,
            host=settings.host,
            port=settings.port,
            header_timeout=settings.header_timeout,
            body_timeout=settings.body_timeout,
            max_connections=settings.max_connections,
            tls=tls,
            stream_buffer=int(settings.stream_buffer_mb * 2**20),
            stream_idle_timeout=settings.stream_idle_timeout,
        )
    else:
        server = HttpServer(
            app,
            host=settings.host,
            port=settings.port,
            busy_poll=settings.busy_poll_us / 1e6,
            # a worker process's reply, due within a fraction of a millisecond, is polled for
            # rather than slept through (an in-process engine answers within the call)
            reply_poll=REPLY_POLL_S if settings.engine == "local" else 0.0,
            header_timeout=settings.header_timeout,
            body_timeout=settings.body_timeout,
            max_connections=settings.max_connections,
            tls=tls.http if tls else None,
            write_timeout=settings.write_timeout,
            max_unread=int(settings.max_unread_mb * 2**20) if settings.max_unread_mb else None,
            stream_buffer=int(settings.stream_buffer_mb * 2**20),
            stream_idle_timeout=settings.stream_idle_timeout,
        )
        app.controller.watch_replies(server)
    # A frontend makes a few dozen short-lived objects per request; with thousands of requests
    # queued under overload, the collector's default thresholds run full collections over all
    # of them often, each holding the event loop (bench/RESULTS.md, "Small choices in the
    # code, measured").
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is not built for Windows
        asyncio.run(server.serve(announce=_listening))
    else:
        uvloop.run(server.serve(announce=_listening))


def _listening(url: str, app: HeadwayApp) -> None:
    _announce(url, app)
    gc.freeze()  # what start-up made lives as long as the server: out of the collector's way


def _announce(url: str, app: HeadwayApp) -> None:
    controller = app.controller
    engine = controller.statistics()
    print(
        f"headway: serving {len(controller.repository.names)} models from "
        f"{controller.repository.root} on {url} "
        + "".join(
            f"and gRPC {address} "
            for address in (getattr(companion, "address", None) for companion in app.companions)
            if isinstance(address, str)
        )
        + {
            "inline": "in its own process (inline engine)",
            "ray": "with its models' replicas as Ray actors (ray engine)",
        }.get(engine.engine, f"with {engine.size} workers"),
        file=sys.stderr,
        flush=True,
    )
