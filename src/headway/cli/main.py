"""`headway`: serve a model repository, run the demo, benchmark a server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from headway.cli.serve import ServeSettings, run
from headway.control.policy import POLICIES
from headway.errors import ConfigError
from headway.runtime.engines.inline import LOOP, THREAD
from headway.store.db import SYNC_MODES

F = TypeVar("F", bound=Callable[..., object])


def _positive_setting(flag: str, help: str) -> Callable[[F], F]:
    """A `serve` option for a positive number whose default is the `ServeSettings` field of
    its name (`--write-timeout`: `write_timeout`)."""
    default = getattr(ServeSettings, flag.removeprefix("--").replace("-", "_"))
    return click.option(
        flag, default=default, show_default=True, type=click.FloatRange(min=0.001), help=help
    )


@click.group(
    context_settings={"auto_envvar_prefix": "HEADWAY", "help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name="headway")
def cli() -> None:
    """Headway: prediction serving with deadlines."""


@cli.command(context_settings={"auto_envvar_prefix": "HEADWAY"})
@click.option(
    "--repository",
    "-r",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="Model repository folder: <model>/model.yaml, <model>/<version>/.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (HTTP and gRPC): 0.0.0.0 to serve other machines, with an "
    "admin token (docs/security.md).",
)
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="HTTP port (REST: the Open Inference Protocol, the apps API, /metrics).",
)
@click.option(
    "--grpc-port",
    default=ServeSettings.grpc_port,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="gRPC port for the Open Inference Protocol's GRPCInferenceService, as Triton's "
    "(tritonclient.grpc); 0 serves no gRPC.",
)
@click.option(
    "--workers",
    default=ServeSettings.workers,
    show_default=True,
    type=click.IntRange(1),
    help="Worker processes hosting the models.",
)
@click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path(".headway/state.db"),
    show_default=True,
    help="SQLite file that keeps what was loaded across restarts.",
)
@click.option(
    "--state-sync",
    default=ServeSettings.state_sync,
    show_default=True,
    type=click.Choice(SYNC_MODES),
    help="normal: what the server acknowledged survives a crash of its process (kill -9); "
    "full: also a crash of the machine, waiting for the disk at each write "
    "(docs/operations.md).",
)
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    envvar="HEADWAY_CONFIG",
    help="headway.yaml declaring applications ('apps:'): models, policy, SLO, default output.",
)
@click.option(
    "--memory-budget-mb",
    default=None,
    type=click.FloatRange(min=1),
    help="Serve more models than fit: load on demand, evict to stay within this budget "
    "(split evenly among workers).",
)
@click.option(
    "--scheduler",
    default="headway",
    show_default=True,
    type=click.Choice(sorted(POLICIES)),
    help="Scheduling policy: headway (deadline-aware, early rejection) or a Clipper-style "
    "baseline (FIFO, AIMD, no early rejection) for comparisons.",
)
@click.option(
    "--schedule-ahead-ms",
    default=ServeSettings.schedule_ahead_ms,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Send a worker its next batch while it still runs this much predicted work, so it "
    "does not wait for a busy frontend (0: one action in flight per worker). Experimental: "
    "try 10-20 under sustained overload, when workers idle while the frontend is busy.",
)
@click.option(
    "--busy-poll-us",
    default=ServeSettings.busy_poll_us,
    show_default=True,
    type=click.FloatRange(min=0),
    help="After each read or answer, the frontend (and each worker, after each action) polls "
    "for the next one for this many microseconds instead of sleeping (0: off). Use it for "
    "the lowest latency at low load when a core can be spared for it: it costs up to that "
    "much CPU per request (try 1000). Native HTTP server only.",
)
@click.option(
    "--max-body-mb",
    default=64.0,
    show_default=True,
    type=click.FloatRange(min=0.001),
    help="Largest request body, after gzip/deflate decoding; larger is 413.",
)
@_positive_setting(
    "--header-timeout",
    "Seconds a request's head (request line and headers) may take to arrive; then 408 "
    "and the connection closes (native HTTP server; and a gRPC connection's preface).",
)
@_positive_setting(
    "--body-timeout",
    "Seconds a request's body may take to arrive after its head; then 408 and the "
    "connection closes (native HTTP server; a gRPC call ends DEADLINE_EXCEEDED).",
)
@click.option(
    "--max-connections",
    default=ServeSettings.max_connections,
    show_default=True,
    type=click.IntRange(min=1),
    help="Client connections served at once, per port (HTTP, gRPC); one more is answered "
    "503 (gRPC: GOAWAY) and closed, unless a gRPC connection is idle: the one idle longest "
    "is closed to make room.",
)
@_positive_setting(
    "--write-timeout",
    "Seconds a client may leave its answers unread (its socket taking no bytes; over "
    "gRPC also an answer waiting for its flow-control window) before its connection is "
    "closed and what it left unread dropped (nginx's send_timeout).",
)
@_positive_setting(
    "--stream-buffer-mb",
    "Bytes (MiB) of a streamed answer (server-sent events) a client may leave unread past "
    "its socket's buffers; past it the stream is cut off and its request withdrawn.",
)
@_positive_setting(
    "--stream-idle-timeout",
    "Seconds a stream (server-sent events, a gRPC ModelStreamInfer) may pass sending and "
    "receiving nothing; then it ends with an error and its requests are withdrawn.",
)
@_positive_setting(
    "--max-prompt-kb",
    "The largest prompt (KiB) the text routes take (/v1/completions, /v1/chat/completions, "
    "/generate); a larger one is answered 413 before anything runs.",
)
@_positive_setting(
    "--grpc-idle-timeout",
    "Seconds a gRPC connection with no call open is kept (PINGs do not keep it); then "
    "GOAWAY and close. Clients reconnect for their next call.",
)
@_positive_setting(
    "--grpc-max-buffered-mb",
    "Request bytes the gRPC server holds for calls still arriving, all connections "
    "together (a quarter of it at most on one; at least twice --max-body-mb); a call whose "
    "request would pass it ends RESOURCE_EXHAUSTED.",
)
@click.option(
    "--max-answer-mb",
    default=None,
    type=click.FloatRange(min=0.001),
    help="Largest answer a request may ask for; larger is 400 (gRPC: RESOURCE_EXHAUSTED). "
    "[default: 4x --max-body-mb]",
)
@click.option(
    "--max-unread-mb",
    default=None,
    type=click.FloatRange(min=0.001),
    help="Answer bytes that clients not reading them may leave waiting, all together (native "
    "HTTP server); past it the connections holding the most are closed. A connection may "
    "hold 2x --max-answer-mb. [default: 4x --max-answer-mb]",
)
@click.option(
    "--endpoint",
    default=None,
    help="Worker RPC endpoint (default: an ipc:// socket; tcp://HOST:PORT for remote).",
)
@click.option(
    "--engine",
    default="local",
    show_default=True,
    type=click.Choice(["local", "inline", "ray"]),
    help="Where models run: local (isolated worker processes), inline (in the server's own "
    "process: no hop to a worker, lowest latency for small models, no isolation; --workers "
    "is then 1) or ray (each model replica a Ray actor, placed on a Ray cluster's nodes by "
    "the resources in its model.yaml; docs/cluster.md).",
)
@click.option(
    "--inline-runs",
    default=ServeSettings.inline_runs,
    show_default=True,
    type=click.Choice([THREAD, LOOP]),
    help="With --engine inline, where a batch runs: on the event loop itself, between two "
    "turns of reads (nothing is read meanwhile), or, one predicted over 2 ms, in a thread "
    "beside the loop (the loop goes on reading while the model computes on another core; "
    "for a machine that can give the server two cores; a pure-Python model, which holds "
    "the interpreter's lock as it computes, gains nothing).",
)
@click.option(
    "--ray-address",
    default=None,
    help="With --engine ray: the Ray cluster to join ('auto', or HOST:PORT of its head). "
    "Without it, Headway starts a Ray instance on this machine and stops it at exit.",
)
@click.option(
    "--http",
    default="native",
    show_default=True,
    type=click.Choice(["native", "granian", "uvicorn"]),
    help="HTTP server: Headway's own (httptools), granian (Rust, RSGI; docs/decisions.md "
    "compares them) or uvicorn (ASGI).",
)
@click.option(
    "--admin-token",
    default=None,
    help="Bearer token that the routes changing state (model load/unload, app changes, "
    "feedback) require; prefer the HEADWAY_ADMIN_TOKEN environment variable, which other "
    "users cannot read in the process list (docs/security.md).",
)
@click.option(
    "--inference-token",
    default=None,
    help="Bearer token that every route but the health probes requires (inference, "
    "prediction, metadata, /metrics; the admin token is accepted too); prefer "
    "HEADWAY_INFERENCE_TOKEN (docs/operations.md).",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Certificate chain (PEM) to serve HTTPS on --port and gRPC over TLS (ALPN h2) on "
    "--grpc-port; needs --tls-key (docs/operations.md).",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Private key (PEM, unencrypted) of --tls-cert.",
)
@click.option(
    "--allow-origin",
    multiple=True,
    help="A web origin (scheme://host[:port]) whose pages may call the routes that change "
    "state and read the answers (CORS); repeat it or separate origins with commas; '*' allows "
    "every page (with a warning). Without it, a browser request from another origin to those "
    "routes is refused (docs/protocol.md).",
)
@click.option(
    "--allow-host",
    multiple=True,
    help="A name besides localhost and 127.0.0.1 that requests to the routes that change "
    "state may be addressed to (their Host header) on a loopback --host: for a proxy that "
    "forwards its own name; repeat it or separate names with commas.",
)
@click.option(
    "--plan",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A plan file from `headway plan`: each planned model gets its replicas (one worker "
    "process each; --workers is then their total) and max batch size.",
)
@click.option(
    "--tune/--no-tune",
    default=False,
    show_default=True,
    help="With --plan: InferLine's tuner adds and removes replicas (worker processes) as the "
    "traffic departs from the plan's envelope; changes in /metrics and the log.",
)
@click.option(
    "--tune-max-replicas",
    default=ServeSettings.tune_max_replicas,
    show_default=True,
    type=click.IntRange(min=1),
    help="With --tune: the most replicas the tuner gives one stage (each is a worker process).",
)
@click.option(
    "--tune-hold-down-s",
    default=ServeSettings.tune_hold_down_s,
    show_default=True,
    type=click.FloatRange(min=0.0),
    help="With --tune: seconds after any replica change before the tuner may scale down. "
    "Raise it when worker processes take long to start (large models) or traffic comes in "
    "bursts further apart than this; lower it to give idle replicas back sooner.",
)
@click.option(
    "--tune-trailing-s",
    default=ServeSettings.tune_trailing_s,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="With --tune: seconds of past traffic a scale-down must still cover (with a margin). "
    "Raise it for traffic whose bursts recur at longer intervals; lower it to follow a falling "
    "rate sooner.",
)
@click.option(
    "--dashboard-history-s",
    default=ServeSettings.dashboard_history_s,
    show_default=True,
    type=click.IntRange(min=0),
    help="Seconds of per-second figures the dashboard's charts keep (memory is fixed by it: "
    "docs/dashboard.md); 0 keeps none (the tables still show).",
)
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="Least severe log messages shown: warning for normal use, info or debug to investigate.",
)
def serve(**options: object) -> None:
    """Serve a model repository over the Open Inference Protocol."""
    try:
        run(ServeSettings(**options))  # type: ignore[arg-type]
    except ConfigError as exc:
        raise click.ClickException(exc.message) from None


def _add_optional_commands() -> None:
    from headway.cli.planning import plan_command
    from headway.cli.profiling import profile_command
    from headway.cli.trace import trace

    cli.add_command(trace)
    cli.add_command(profile_command)
    cli.add_command(plan_command)
    try:
        from headway.cli.demo import demo

        cli.add_command(demo)
    except ImportError:  # pragma: no cover
        pass
    try:
        from headway.cli.bench import bench
    except ImportError:  # pragma: no cover - the load generator ships with the package
        return
    cli.add_command(bench)


_add_optional_commands()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
