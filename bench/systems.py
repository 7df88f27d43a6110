"""Every system under test: how to install it, how to start it on a model, what it is called.

A system serves one model per start (``lr``, ``mlp`` or ``wide``; the no-op app serves none) on
127.0.0.1 and answers the Open Inference Protocol JSON body at ``POST /v2/models/{model}/infer``.
``wide`` (the overload scenario's compute-bound MLP) is started exactly as ``mlp`` is, through the
same code path of every system and under the model name ``mlp``; only the TorchScript file
differs (``--path wide.pt``).
Resources are the same for each: one HTTP process; model work in that process or, where the
system's design puts it elsewhere (Headway, MLServer, LitServe, Ray), in one worker process;
PyTorch and BLAS limited to one thread. Batching systems batch at most 32 rows and wait at most
10 ms for a batch to fill (Ray's default wait; the others set to match).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from models import ModelPaths
from peers.common import PEERS, Server, venv_python

MAX_BATCH = 32
WAIT_MS = 10.0
#: The same thread limits for every server (BLAS/OpenMP pools would otherwise size to the cores).
#: Ray Serve's max_ongoing_requests. Its default (5) makes the proxy hold the other 27 of 32
#: connections' requests and probe the replica's queue length (0.1 s timeout) for each; on this
#: machine that gave ~30 req/s at 32 connections, against ~300 with 64 (measured). 64 for both.
RAY_ONGOING = 64
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    ready_path: str  # GET it until 200
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    cleanup: tuple[Path, ...] = ()  # folders to remove once the server has stopped


@dataclass(frozen=True)
class System:
    name: str  # command-line and table name
    family: str  # the product; a family's best configuration is what Headway is held against
    label: str  # what the configuration is
    venv: str | None  # bench/peers/<venv>/requirements.txt; None: this interpreter (Headway)
    launch: Callable[[str, ModelPaths, int, Path], Launch]
    lr_output: str = "probabilities"  # the output name that makes it compute predict_proba
    kinds: tuple[str, ...] = ("lr", "mlp", "wide")  # the models it serves in the full run
    note: str = ""

    @property
    def python(self) -> str:
        return sys.executable if self.venv is None else str(venv_python(self.venv))

    def server(self, kind: str, paths: ModelPaths, port: int, work: Path) -> Server:
        if kind == "wide":  # the mlp code path, on the wide model's file
            spec = self.launch("mlp", replace(paths, mlp=paths.wide), port, work)
        else:
            spec = self.launch(kind, paths, port, work)
        model = served_name(kind)
        return Server(
            name=f"{self.name}/{kind}", argv=spec.argv,
            ready_url=f"http://127.0.0.1:{port}{spec.ready_path.format(model=model)}",
            log=work / "logs" / f"{self.name}-{kind}.log",
            env={**THREADS, **spec.env}, cwd=spec.cwd, cleanup=spec.cleanup,
        )  # fmt: skip


def served_name(kind: str) -> str:
    """The model name a system serves ``kind`` under (in the URL): ``wide`` is served as ``mlp``."""
    return "mlp" if kind == "wide" else kind


def _model_path(kind: str, paths: ModelPaths) -> str:
    return str(paths.lr if kind == "lr" else paths.mlp)


# -- Headway ----------------------------------------------------------------------------------------
HEADWAY_YAML = {
    "lr": "framework: sklearn\nmax_batch_size: 64\n",
    "mlp": (
        "framework: torch\nmax_batch_size: 64\n"
        "inputs: [{name: input-0, datatype: FP32, shape: [-1, 20]}]\n"
    ),
}


def headway_repository(kind: str, paths: ModelPaths, work: Path) -> Path:
    """A repository holding the one model: ``<work>/headway-<kind>/<kind>/1/model.*``."""
    root = work / f"headway-{kind}"
    shutil.rmtree(root, ignore_errors=True)
    version = root / kind / "1"
    version.mkdir(parents=True)
    source = paths.lr if kind == "lr" else paths.mlp
    shutil.copy(source, version / ("model.joblib" if kind == "lr" else "model.pt"))
    (root / kind / "model.yaml").write_text(HEADWAY_YAML[kind])
    return root


def _headway(kind: str, paths: ModelPaths, port: int, work: Path, *extra: str) -> Launch:
    repo = headway_repository(kind, paths, work)
    state = work / f"headway-{kind}-{port}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{state}{suffix}").unlink(missing_ok=True)
    return Launch(
        [sys.executable, "-m", "headway.cli.main", "serve", "--repository", str(repo),
         "--port", str(port), "--grpc-port", "0", "--workers", "1", "--state", str(state),
         *extra],
        "/v2/models/{model}/ready",
    )  # fmt: skip


def _headway_inline(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
    return _headway(kind, paths, port, work, "--engine", "inline")


def _headway_granian(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
    return _headway(kind, paths, port, work, "--http", "granian")


#: The busy-polling configurations' window (`headway serve --busy-poll-us`).
BUSY_POLL_US = "1000"


def _headway_poll(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
    return _headway(kind, paths, port, work, "--busy-poll-us", BUSY_POLL_US)


def _headway_inline_poll(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
    return _headway(kind, paths, port, work, "--engine", "inline", "--busy-poll-us", BUSY_POLL_US)


# -- peers ------------------------------------------------------------------------------------------
def _starlette(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
    argv = [str(venv_python("starlette")), str(PEERS / "starlette" / "app.py"), "--model", kind,
            "--port", str(port)]  # fmt: skip
    if kind != "noop":
        argv += ["--path", _model_path(kind, paths)]
    return Launch(argv, "/v2/health/ready")


def _granian_noop(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
    return Launch(
        [sys.executable, str(PEERS / "granian" / "app.py"), "--port", str(port)],
        "/v2/health/ready",
        cwd=PEERS / "granian",
    )


def _nginx(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
    """nginx from the Debian package with its own config, prefix and PID file in ``work``."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    root = work / f"nginx-{port}"
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "nginx.conf"
    template = (PEERS / "nginx" / "nginx.conf").read_text()
    conf.write_text(template.format(work=root, port=port))
    return Launch([nginx, "-p", str(root), "-c", str(conf)], "/v2/health/ready", cleanup=(root,))


def _ray(batch: int) -> Callable[[str, ModelPaths, int, Path], Launch]:
    def launch(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
        temp = Path("/tmp") / f"hwbench-ray-{port}"  # short: Ray's socket paths must fit 107 bytes
        return Launch(
            [str(venv_python("ray")), str(PEERS / "ray" / "app.py"), "--model", kind, "--path",
             _model_path(kind, paths), "--port", str(port), "--batch", str(batch), "--ongoing", str(RAY_ONGOING), "--wait-ms",
             str(WAIT_MS), "--temp-dir", str(temp)],
            "/v2/health/ready",
            # Ray runs its workers at nice 15 by default; here they would then lose the CPU to
            # the (nice 0) load generator sharing the machine. Same priority as everyone else.
            env={"RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0",
                 "PYTHONPATH": str(PEERS)},  # the app imports ray_peer
            cleanup=(temp,),
        )  # fmt: skip

    return launch


def _litserve(batch: int) -> Callable[[str, ModelPaths, int, Path], Launch]:
    def launch(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
        return Launch(
            [str(venv_python("litserve")), str(PEERS / "litserve" / "app.py"), "--model", kind,
             "--path", _model_path(kind, paths), "--port", str(port), "--batch", str(batch),
             "--wait-ms", str(WAIT_MS)],
            "/health",
            cwd=work,
        )  # fmt: skip

    return launch


def _mlserver(batch: int) -> Callable[[str, ModelPaths, int, Path], Launch]:
    def launch(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
        return Launch(
            [str(venv_python("mlserver")), str(PEERS / "mlserver" / "app.py"), "--model", kind,
             "--path", _model_path(kind, paths), "--port", str(port), "--batch", str(batch),
             "--wait-ms", str(WAIT_MS), "--workdir", str(work / f"mlserver-{kind}-{port}")],
            "/v2/models/{model}/ready",
        )  # fmt: skip

    return launch


def _bentoml(kind: str, paths: ModelPaths, port: int, work: Path) -> Launch:
    bentoml = str(Path(venv_python("bentoml")).with_name("bentoml"))
    return Launch(
        [bentoml, "serve", "service:OIP", "--host", "127.0.0.1", "--port", str(port)],
        "/readyz",
        env={"BENCH_MODEL": kind, "BENCH_MODEL_PATH": _model_path(kind, paths),
             "BENTOML_DO_NOT_TRACK": "true", "BENTOML_HOME": str(work / "bentoml-home")},
        cwd=PEERS / "bentoml",
    )  # fmt: skip


SYSTEMS: list[System] = [
    System(
        "headway",
        "headway",
        "Headway, 1 HTTP process + 1 worker process (--workers 1)",
        None,
        _headway,
    ),
    System(
        "headway-inline",
        "headway",
        "Headway with --engine inline: the model in the HTTP process, no worker process",
        None,
        _headway_inline,
    ),
    System(
        "headway-granian",
        "headway",
        "Headway as `headway`, its app behind granian (--http granian) instead of its own server",
        None,
        _headway_granian,
        kinds=("lr", "wide"),
    ),
    System(
        "headway-poll",
        "headway",
        f"Headway as `headway`, busy-polling (--busy-poll-us {BUSY_POLL_US}): the frontend and "
        "the worker poll for the next read instead of sleeping",
        None,
        _headway_poll,
        kinds=("lr",),
    ),
    System(
        "headway-inline-poll",
        "headway",
        f"Headway with --engine inline --busy-poll-us {BUSY_POLL_US}",
        None,
        _headway_inline_poll,
        kinds=("lr",),
    ),
    System(
        "starlette",
        "starlette",
        "bare Starlette + uvicorn, predict inline on the event loop",
        "starlette",
        _starlette,
    ),
    System(
        "noop",
        "noop",
        "bare Starlette + uvicorn, no-op handler (the HTTP ceiling)",
        "starlette",
        _starlette,
        kinds=("noop",),
    ),
    System(
        "granian-noop",
        "noop",
        "granian (Rust HTTP server), no-op RSGI handler: decodes the body with orjson, answers "
        "a constant (the ceiling of a Python handler)",
        None,
        _granian_noop,
        kinds=("noop",),
    ),
    System(
        "nginx",
        "noop",
        "nginx (Debian package), 1 worker process, answers a constant (the HTTP limit)",
        None,
        _nginx,
        kinds=("noop",),
    ),
    System(
        "ray",
        "ray",
        f"Ray Serve, 1 replica, no batching, max_ongoing_requests {RAY_ONGOING}",
        "ray",
        _ray(0),
    ),
    System(
        "ray-batch",
        "ray",
        f"Ray Serve, 1 replica, @serve.batch({MAX_BATCH}, {WAIT_MS:g} ms), max_ongoing_requests {RAY_ONGOING}",
        "ray",
        _ray(MAX_BATCH),
    ),
    System(
        "litserve",
        "litserve",
        "LitServe, 1 API server + 1 worker, no batching",
        "litserve",
        _litserve(0),
    ),
    System(
        "litserve-batch",
        "litserve",
        f"LitServe, 1 API server + 1 worker, max_batch_size {MAX_BATCH}, {WAIT_MS:g} ms",
        "litserve",
        _litserve(MAX_BATCH),
    ),
    System(
        "mlserver",
        "mlserver",
        "MLServer, sklearn runtime, 1 worker, no batching",
        "mlserver",
        _mlserver(0),
        lr_output="predict_proba",
    ),
    System(
        "mlserver-batch",
        "mlserver",
        f"MLServer, sklearn runtime, 1 worker, adaptive batching ({MAX_BATCH}, {WAIT_MS:g} ms)",
        "mlserver",
        _mlserver(MAX_BATCH),
        lr_output="predict_proba",
    ),
    System(
        "bentoml",
        "bentoml",
        "BentoML, 1 worker, sync API (thread pool), no batching",
        "bentoml",
        _bentoml,
        note="not batched: a batchable BentoML API takes a bare array body, not the OIP one",
    ),
]
BY_NAME = {s.name: s for s in SYSTEMS}
#: What `--quick` runs: one configuration per product (the one the issue names first).
QUICK = ("headway", "starlette", "noop", "ray", "litserve", "mlserver-batch", "bentoml")
