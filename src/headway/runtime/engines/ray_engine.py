"""The Ray engine: workers as Ray actors on the nodes of a Ray cluster.

Ray places each worker on a node with the resources its model declares and reports actors
and nodes that die; everything else is the local engine's (Headway's worker loop, its wire
format over `tcp://`, never Ray's object store). `ray` is imported here only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from typing import Any

from headway.errors import ConfigError, ModelNotReady
from headway.repository import ModelConfig
from headway.resources import DEFAULT, Resources, unmet
from headway.runtime.engines.local import _WORKER_ENV, Launched, LocalEngine, _Process
from headway.runtime.engines.ray_actor import WorkerActor
from headway.runtime.wire import pack
from headway.runtime.worker import FRAMEWORKS_ENV

log = logging.getLogger("headway.engine")

#: Ray's object store for a Ray instance Headway starts itself: nothing on the hot path uses
#: it, so the smallest Ray accepts (75 MiB) with some room.
OBJECT_STORE_BYTES = 100 * 2**20
#: Ray settings for an instance Headway starts itself (a user's environment overrides them).
_OWN_INSTANCE_ENV = {
    "RAY_worker_niceness": "0",
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}
#: Seconds after which a worker that Ray has not placed yet is reported in the log.
PLACEMENT_WARNING_S = 30.0
#: Seconds a released actor gets to leave its loop before it is killed.
RELEASE_GRACE_S = 2.0


class _Actor:
    """A worker's Ray actor, watched like a subprocess (`local.Launched`)."""

    def __init__(self, handle: Any, endpoint: str, identity: str, secret: str) -> None:
        self.handle = handle
        self._where: Any = handle.where.remote()  # ObjectRefs
        # The server's secret as an argument of the call, not in the actor's environment:
        # Ray keeps runtime environments in its cluster state for anyone to list.
        self._run: Any = handle.run.remote(endpoint, identity, secret)
        self.place: dict[str, Any] | None = None
        self._code: int | None = None

    def located(self) -> dict[str, Any] | None:
        """Where Ray placed the actor (node id, IP, host, pid), once it has started."""
        import ray

        if self.place is None:
            ready, _ = ray.wait([self._where], timeout=0)
            if ready:
                try:
                    self.place = ray.get(ready[0])
                except Exception:  # the actor died before it said where: `poll` reports it
                    return None
        return self.place

    @property
    def pid(self) -> int | None:
        place = self.located()
        return None if place is None else int(place["pid"])

    def poll(self) -> int | None:
        """None while the worker loop runs (or the actor waits to be placed); 0 once it
        ended as told, 1 when the actor died (killed, crashed, or its node left)."""
        import ray

        if self._code is None:
            ready, _ = ray.wait([self._run], timeout=0)
            if ready:
                try:
                    ray.get(ready[0])
                    self._code = 0
                except Exception as exc:
                    log.warning("worker actor died: %s", str(exc).splitlines()[0])
                    self._code = 1
        return self._code

    def kill(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.kill(self.handle, no_restart=True)

    def wait(self, timeout: float | None = None) -> int | None:
        end = time.monotonic() + (timeout if timeout is not None else 10.0)
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        return self._code


class RayEngine(LocalEngine):
    """Workers as Ray actors; the data plane of the local engine over `tcp://`.

    Without a memory budget, each replica of a model is its own actor, created when the model
    loads and removed when it unloads (as a Ray Serve deployment's replicas are). Under a memory
    budget the engine keeps a pool of `workers` actors with default resources, and the controller
    loads and evicts models in them as it does in local worker processes.

    A dead worker is noticed twice over: its connection closes (at once, for a process that died),
    and Ray reports its actor dead (for a node that vanished without closing anything, once Ray's
    health checks give up on it). Either way the controller requeues its batch once and the engine
    starts a replacement actor, which Ray places wherever resources allow."""

    kind = "ray"

    def __init__(
        self,
        workers: int,
        *,
        address: str | None = None,
        pool: bool = False,
        num_cpus: int | None = None,
        endpoint: str | None = None,
        watch_interval: float = 0.2,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            max(1, workers),
            endpoint=endpoint or "tcp://0.0.0.0:0",
            watch_interval=watch_interval,
            env=env,
        )
        if not self.endpoint.startswith("tcp://"):
            raise ConfigError(
                f"--engine ray needs a tcp:// worker endpoint (actors may run on other nodes), "
                f"got {self.endpoint!r}"
            )
        #: Actors started at once: a pool under a memory budget; else none until models load.
        self.size = workers if pool else 0
        self.pool = pool
        self.address = address
        self.num_cpus = num_cpus
        #: What each actor asks for: the environment of a worker process, and its resources.
        self.actor_env = {**_WORKER_ENV, **(env or {})}
        self._resources: dict[int, Resources] = {}
        #: The framework of each model's own actors: they import only that one at start.
        self._frameworks: dict[int, str] = {}
        self._ids = itertools.count(self.size)
        self._released: set[int] = set()
        self._actors: list[_Actor] = []
        self._actor_class: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        #: The address actors connect to (the listening endpoint with this node's IP).
        self.advertised = ""

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._connect()
        import ray

        self._actor_class = ray.remote(WorkerActor)
        await super().start()  # listens (binding port 0 to a free port) and starts the pool
        host, _, port = self.endpoint[len("tcp://") :].rpartition(":")
        if host in ("", "*", "0.0.0.0"):  # listening everywhere: actors dial this node's IP
            host = ray.util.get_node_ip_address()
        self.advertised = f"tcp://{host}:{port}"
        for worker in range(self.size):  # the pool's actors, now that the address is known
            self._spawn(worker)
        self._tasks.append(asyncio.create_task(self._watch_placement()))

    def _connect(self) -> None:
        import ray

        if ray.is_initialized():
            return
        options: dict[str, Any] = {
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            "configure_logging": False,
        }
        # Ray's own variable names a cluster too (as for any Ray program); empty is none.
        address = self.address or os.environ.pop("RAY_ADDRESS", "")
        if address:
            ray.init(address=address, **options)
            return
        # Our own instance, for as long as this server runs. Its workers at normal priority:
        # Ray starts them at nice 15, where they would lose the CPU to anything else here.
        # No idle workers started ahead: each actor runs with its own environment anyway.
        for name, value in _OWN_INSTANCE_ENV.items():
            os.environ.setdefault(name, value)
        ray.init(
            address="local",  # a new instance, even if another runs on this machine
            num_cpus=int(self.num_cpus or os.cpu_count() or 1),
            object_store_memory=OBJECT_STORE_BYTES,
            **options,
        )

    async def _watch_placement(self) -> None:
        """Say which workers Ray has not placed yet, and what they wait for (as Ray Serve
        does for replicas that take long to schedule): a model whose nodes are full waits,
        and stays LOADING, until room frees up or a node joins."""
        import ray

        warned: set[tuple[int, int]] = set()
        while not self._stopping:
            await asyncio.sleep(PLACEMENT_WARNING_S / 3)
            assert self._loop is not None
            now = self._loop.time()
            for proc in list(self._procs.values()):
                key = (proc.worker, proc.incarnation)
                if proc.ready or key in warned or now - proc.started < PLACEMENT_WARNING_S:
                    continue
                assert isinstance(proc.process, _Actor)
                if proc.process.located() is None:
                    warned.add(key)
                    log.warning(
                        "worker %d has waited %.0f s for Ray to place it; it needs %s, and the "
                        "cluster has %s free",
                        proc.worker,
                        now - proc.started,
                        self._resources.get(proc.worker, DEFAULT).describe(),
                        _free(ray.available_resources()),
                    )

    async def stop(self, timeout: float = 3.0) -> None:
        for task in self._tasks:
            task.cancel()
        await super().stop(timeout)
        for actor in self._actors:
            actor.kill()
        self._actors.clear()
        import ray

        if ray.is_initialized():
            ray.shutdown()  # stops the instance this server started; else only disconnects

    # -- placement ---------------------------------------------------------------------------
    def place(self, config: ModelConfig) -> list[int] | None:
        """New actors for the replicas of `config` (None under a memory budget: the pool
        hosts every model). ModelNotReady, with the reason, if no node can ever host one."""
        if self.pool:
            return None
        reason = unmet(config.resources, self.node_resources())
        if reason is not None:
            raise ModelNotReady(f"model {config.name!r} cannot be placed: {reason}")
        return [self._start_replica(config) for _ in range(config.replicas)]

    def grow(self, config: ModelConfig) -> int | None:
        """One more actor for `config` (the tuner's replica), placed by its resources; None in
        a pool (under a memory budget) or when no node can host it."""
        if self.pool or unmet(config.resources, self.node_resources()) is not None:
            return None
        return self._start_replica(config)

    def _start_replica(self, config: ModelConfig) -> int:
        worker = next(self._ids)
        self._resources[worker] = config.resources
        self._frameworks[worker] = config.framework
        self._spawn(worker)
        return worker

    def retire(self, worker: int) -> bool:
        """Remove a model's worker for good (the model was unloaded): its actor leaves the
        cluster. A worker of the pool stays."""
        if worker not in self._resources:
            return False
        self._released.add(worker)
        proc = self._procs.pop(worker, None)
        if proc is None:
            return True
        if proc.connection is not None:
            self._write(proc, pack({"op": "stop"}))
        actor = proc.process
        assert self._loop is not None and isinstance(actor, _Actor)
        self._loop.call_later(RELEASE_GRACE_S, self._forget, actor)
        return True

    def _forget(self, actor: _Actor) -> None:
        actor.kill()
        with contextlib.suppress(ValueError):
            self._actors.remove(actor)

    def node_resources(self) -> list[dict[str, float]]:
        """The total resources of each alive node of the cluster."""
        import ray

        return [dict(node["Resources"]) for node in ray.nodes() if node.get("Alive")]

    def nodes(self) -> dict[int, str]:
        """The Ray node id of each placed worker."""
        placed = {}
        for worker, proc in self._procs.items():
            assert isinstance(proc.process, _Actor)
            where = proc.process.located()
            if where is not None:
                placed[worker] = str(where["node"])
        return placed

    # -- actors ------------------------------------------------------------------------------
    def _launch(self, worker: int, identity: str) -> Launched:
        resources = self._resources.get(worker, DEFAULT)
        env = dict(self.actor_env)
        if worker in self._frameworks:
            env[FRAMEWORKS_ENV] = self._frameworks[worker]
        options: dict[str, Any] = {
            "num_cpus": resources.cpus,
            "num_gpus": resources.gpus,
            "resources": dict(resources.custom),
            "max_restarts": 0,  # the engine replaces a dead worker itself, as a new actor
            "runtime_env": {"env_vars": env},
        }
        if resources.memory_mb is not None:
            options["memory"] = int(resources.memory_mb * 2**20)
        handle = self._actor_class.options(**options).remote()
        actor = _Actor(handle, self.advertised, identity, self._secret)
        self._actors.append(actor)
        return actor

    def _spawn(self, worker: int) -> None:
        if self.advertised:  # else `start` spawns the pool once the address is known
            super()._spawn(worker)

    def _respawn(self, worker: int) -> None:
        if worker not in self._released:
            super()._respawn(worker)

    def _exited(self, proc: _Process, code: int | None) -> None:
        if self._procs.get(proc.worker) is proc:
            assert isinstance(proc.process, _Actor)
            self._forget(proc.process)  # a dead actor, or one cut off: gone for good
        super()._exited(proc, code)

    def _disconnected(self, proc: _Process) -> None:
        """A ready worker's connection closed: its actor is dead or cut off (its node may be
        gone, and Ray may take many seconds to say so). Replace it now."""
        self._exited(proc, None)


def _free(available: dict[str, float]) -> str:
    shown = {k: v for k, v in available.items() if not k.startswith("node:")}
    if "memory" in shown:
        shown["memory_mb"] = shown.pop("memory") / 2**20
    shown.pop("object_store_memory", None)
    return ", ".join(f"{k} {v:g}" for k, v in sorted(shown.items())) or "nothing"
