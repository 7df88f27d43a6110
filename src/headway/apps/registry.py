"""The applications a server runs: created from the config file and the admin API, persisted.

`AppRegistry` says what survives a restart, and who wins when the config file and the admin
API disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from headway.apps.application import SelectionApplication
from headway.apps.config import AppConfig, ModelRef, check_models, parse_app
from headway.apps.records import QueryLog
from headway.control.doors import Serving
from headway.errors import ConfigError, InvalidInput, ModelNotFound
from headway.flows.lookups import Lookups
from headway.flows.plan import PlannedSize
from headway.flows.serving import FlowApplication
from headway.selection import StateRegistry
from headway.store import Store
from headway.store.apps import AppStore

Served = SelectionApplication | FlowApplication

log = logging.getLogger("headway.apps")


class AppNotFound(ModelNotFound):
    """No application by that name."""


class AppRegistry:
    """The set of applications over one controller, kept in the store.

    - Every application's configuration is kept in the store with the config-file entry it came
      from. At start, an application the file declares *unchanged since the last start* is served
      as it was last served (so models added and apps replaced through the API are kept); one whose
      file entry *changed* is served as the file now says. Applications created through the API are
      restored from the store. (An app deleted through the API but still in the file comes back at
      the next start: remove it from the file too.)
    - Config apps follow the config: one the file (or the lack of one) no longer declares is not
      served. Its stored rows are kept aside, untouched: a later config that declares it again,
      unchanged, serves it with what it had learned; an app created through the API under its
      name replaces it.
    - Learned state (weights, per-user states, statistics) is carried over whenever the policy stays
      the same, reconciled with the models now linked (new ones at the mean weight). A fixed
      policy's traffic split lives in the state, so a rollback through the API survives a restart,
      until the configuration's own `split`/`active` changes: then that split is applied.
    - Feedback is written before it is acknowledged: the event and the state rows it changed, in
      one transaction. Other state changes (statistics of predictions) are written at most every
      `flush_interval` seconds after they happen, at once after an admin change, and at shutdown."""

    def __init__(
        self,
        controller: Serving,
        store: Store | None = None,
        declared: Mapping[str, AppConfig] | None = None,
        *,
        flush_interval: float = 1.0,
        config_folder: Path | None = None,
    ) -> None:
        self.controller = controller
        self.db = AppStore(store) if store is not None else None
        self.declared = dict(declared or {})
        #: The `--config` file's folder: its apps' flow files may lie there too (`parse_app`).
        self.config_folder = config_folder
        self.flush_interval = flush_interval
        self.apps: dict[str, Served] = {}
        #: Values flows look up (`PUT /lookups/{key}`), kept in the store.
        self.lookups = Lookups(store)
        self._sources: dict[str, dict[str, Any] | None] = {}  # app -> its config-file entry
        self.late: set[asyncio.Task[Any]] = set()
        self._flusher: asyncio.Task[None] | None = None
        #: The plan in force for an app (`headway serve --plan`), as its description shows it.
        self.plans: dict[str, dict[str, Any]] = {}
        #: The plan's sizes of model-less flow stages, by the name each is planned as.
        self.planned: dict[str, PlannedSize] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Restore the stored applications, apply the config file, start the state flusher."""
        stored = self.db.apps() if self.db else {}
        for name in dict.fromkeys([*stored, *self.declared]):
            row = stored.get(name)
            if row is not None and row.declared is not None and name not in self.declared:
                log.info(
                    "app %s came from a config file that no longer names it: not served (its "
                    "learned state is kept; name it in the config again to serve it)",
                    name,
                )
                continue  # kept in the store untouched, aside
            previous = None
            if row is not None:
                base = self.config_folder if row.declared is not None else None
                try:
                    previous = parse_app(name, row.config, self.controller.repository, base)
                except ConfigError as exc:
                    log.error("stored app %s cannot be served as it was: %s", name, exc.message)
            entry = self.declared.get(name)
            if entry is not None:
                source: dict[str, Any] | None = entry.to_dict()
                unchanged = previous is not None and row is not None and row.declared == source
                config = previous if unchanged and previous is not None else entry
            elif previous is not None:
                config, source = previous, row.declared if row else None
            else:
                continue  # kept in the store untouched: a repaired repository restores it
            old = self._stored_state(name) if self.db else None
            try:
                self._install(config, old, previous, source)
            except ConfigError as exc:  # e.g. a flow file that no longer builds
                log.error("app %s cannot be served: %s", name, exc.message)
        flows = [app.start() for app in self.apps.values() if isinstance(app, FlowApplication)]
        await asyncio.gather(*flows)
        self._flusher = asyncio.ensure_future(self._flush_loop())

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        self.flush()
        for task in list(self.late):
            task.cancel()
        if self.late:
            await asyncio.gather(*self.late, return_exceptions=True)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval)
            try:
                self.flush()
            except Exception:  # a full disk must not stop the serving
                log.exception("saving selection state failed")

    def flush(self) -> None:
        """Write every application's changed state rows."""
        for app in self.apps.values():
            self._save_state(app)

    def _save_state(self, app: Served) -> None:
        rows = app.take_dirty()
        if rows and self.db is not None:
            self.db.save_states(app.name, rows)

    # -- building an application ---------------------------------------------------------------
    def _stored_state(self, name: str) -> dict[str, Any] | None:
        """The stored rows of an app as a StateRegistry dict (its policy named, not configured)."""
        assert self.db is not None
        rows = self.db.states(name)
        top = rows.pop("", None)
        if top is None:
            return None
        return {
            "policy": {"name": top["state"].get("policy")},
            "app": top["state"],
            "users": rows,
            "stats": top.get("stats", {}),
        }

    def _install(
        self,
        config: AppConfig,
        old: Mapping[str, Any] | None,
        previous: AppConfig | None,
        source: dict[str, Any] | None,
        query_log: QueryLog | None = None,
    ) -> Served:
        """Serve `config`, carrying over `old` learned state when the policy is the same."""
        if config.flow is not None:
            return self._install_flow(config, source)
        policy = config.build_policy()
        registry = None
        if old is not None and old["policy"].get("name") == config.policy:
            try:
                registry = StateRegistry.from_dict(
                    {**old, "policy": policy.config(), "personalize": config.personalize}
                )
            except (ValueError, KeyError, TypeError) as exc:
                log.warning(
                    "app %s: stored selection state is unusable (%s); fresh", config.name, exc
                )
        if registry is None:
            registry = StateRegistry(policy, personalize=config.personalize)
        elif config.policy == "fixed" and (
            previous is None or previous.traffic() != config.traffic()
        ):
            registry.set_split(registry.policy.split)  # type: ignore[attr-defined]
        app = SelectionApplication(
            config, self.controller, registry, query_log=query_log, late=self.late
        )
        self._replace(config.name, app)
        self._sources[config.name] = source
        app.mark_all_dirty()
        rows = app.take_dirty()
        if self.db is not None:  # every state row, and no row of a previous policy's
            self.db.save_app(config.name, config.to_dict(), source)
            self.db.save_states(config.name, rows, replace=True)
        return app

    def _install_flow(self, config: AppConfig, source: dict[str, Any] | None) -> FlowApplication:
        app = FlowApplication(config, self.controller, self.lookups, planned=self.planned)
        if self.db is not None:  # its select operators' learned state, when the policy is kept
            app.restore(self.db.states(config.name))
        self._replace(config.name, app)
        self._sources[config.name] = source
        if self.db is not None:
            self.db.save_app(config.name, config.to_dict(), source)
            app.mark_all_dirty()
            self.db.save_states(config.name, app.take_dirty(), replace=True)
        return app

    def _replace(self, name: str, app: Served) -> None:
        """Serve `app` under `name`; a flow app it replaces unloads its stage models."""
        old = self.apps.get(name)
        self.apps[name] = app
        if isinstance(old, FlowApplication) and old is not app:
            task = asyncio.ensure_future(old.stop())
            self.late.add(task)
            task.add_done_callback(self.late.discard)

    # -- the admin API -------------------------------------------------------------------------
    def get(self, name: str) -> Served:
        app = self.apps.get(name)
        if app is None:
            raise AppNotFound(f"unknown application {name!r}; the server has {sorted(self.apps)}")
        return app

    def selection_app(self, name: str, what: str) -> SelectionApplication:
        """The named app, which must be a selection app (flows have no feedback or weights)."""
        app = self.get(name)
        if isinstance(app, FlowApplication):
            raise InvalidInput(f"app {name!r} is a flow; {what} belongs to selection apps")
        return app

    def put(self, name: str, raw: Any) -> tuple[Served, bool]:
        """Create or replace an application; (it, whether it is new). Learned state is kept
        when the policy stays the same."""
        config = parse_app(name, raw, self.controller.repository)
        old = self.apps.get(name)
        if old is None or isinstance(old, FlowApplication) or config.flow is not None:
            source = self._sources.get(name) if old is not None else None
            if isinstance(old, FlowApplication):
                self._save_state(old)  # a replacing flow carries its selections' state over
            return self._install(config, None, None, source), old is None
        self._save_state(old)
        app = self._install(
            config, old.registry.to_dict(), old.config, self._sources.get(name), old.log
        )
        return app, False

    def delete(self, name: str) -> None:
        app = self.get(name)
        if isinstance(app, FlowApplication):
            task = asyncio.ensure_future(app.stop())
            self.late.add(task)
            task.add_done_callback(self.late.discard)
        del self.apps[name]
        self._sources.pop(name, None)
        if self.db is not None:
            self.db.delete_app(name)

    def add_model(self, name: str, model: Any) -> SelectionApplication:
        """Link one more model; it starts at the mean weight of each state (fixed: no traffic)."""
        app = self.selection_app(name, "linking a model")
        ref = ModelRef.parse(model, f"app {name!r}: model")
        if ref.key in app.config.models:
            raise InvalidInput(f"app {name!r} already links model {ref.key!r}")
        check_models(app.config.with_model(ref.key), self.controller.repository)
        app.add_model(ref.key)
        self._persist(app)
        return app

    def set_traffic(
        self, name: str, *, model: str | None = None, split: Mapping[str, float] | None = None
    ) -> SelectionApplication:
        """A fixed policy's active model (a rollback or rollout) or traffic split (a canary)."""
        app = self.selection_app(name, "the traffic split")
        if app.config.policy != "fixed":
            raise InvalidInput(
                f"app {name!r} uses policy {app.config.policy!r}; the active model and traffic "
                "split belong to policy 'fixed'"
            )
        if (model is None) == (split is None):
            raise InvalidInput("give either 'model' or 'split'")
        try:
            if model is not None:
                app.registry.set_active(model)
            else:
                app.registry.set_split(split or {})
        except ValueError as exc:
            raise InvalidInput(f"app {name!r}: {exc}") from None
        app.dirty = True
        self._persist(app)
        return app

    def _persist(self, app: Served) -> None:
        if self.db is not None:
            self.db.save_app(app.name, app.config.to_dict(), self._sources.get(app.name))
        self._save_state(app)

    async def feedback(
        self,
        name: str,
        label: Any,
        *,
        query_id: str | None = None,
        value: Any = None,
        user: str | None = None,
    ) -> dict[str, Any]:
        """Learn from one label; log the event and the state it changed before answering, so
        acknowledged feedback survives a crash (kill -9) of the server."""
        app = self.get(name)
        result = await app.feedback(label, query_id=query_id, value=value, user=user)
        if self.db is not None:
            states = app.take_dirty()
            try:
                self.db.append_feedback(
                    name,
                    result.user,
                    result.query_id,
                    label,
                    result.output,
                    result.losses,
                    states=states,
                )
            except Exception:
                app.mark_all_dirty()  # not written: the flusher tries again
                raise
        return result.to_dict()

    # -- reporting -----------------------------------------------------------------------------
    def describe(self, name: str) -> dict[str, Any]:
        app = self.get(name)
        plan = {"plan": self.plans[name]} if name in self.plans else {}
        if isinstance(app, FlowApplication):
            if plan:
                plan = {"plan": unsized(plan["plan"], app.stage_models.sized)}
            return {**app.describe(), **plan}
        state = app.registry.app
        return {
            "name": name,
            "config": app.config.to_dict(),
            "split": dict(state.split) if app.config.policy == "fixed" else None,
            "ready": app.ready_models(),
            "statistics": app.statistics(),
            **plan,
        }

    def summary(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for name, app in sorted(self.apps.items()):
            if isinstance(app, FlowApplication):
                out.append({"name": name, "flow": app.config.flow, "slo_ms": app.config.slo_ms,
                            "queries": app.stats.queries, "failed": app.stats.failed})  # fmt: skip
                continue
            stats = app.registry.statistics()
            out.append({
                "name": name,
                "policy": app.config.policy,
                "models": list(app.config.models),
                "slo_ms": app.config.slo_ms,
                "weights": {m.model: m.weight for m in stats.models},
                "default_rate": stats.default_rate,
                "feedback": stats.feedback,
            })  # fmt: skip
        return out


def unsized(plan: dict[str, Any], sized: set[str]) -> dict[str, Any]:
    """The plan in force, with each model-less flow stage the app did not size (its flow has
    no such stage, say, since it was planned) shown as not applied."""
    stages = []
    for stage in plan["stages"]:
        if stage.get("flow_stage") and stage["model"] not in sized:
            why = "the app's flow has no worker stage planned under this name"
            stage = {**stage, "applied": [],
                     "not_applied": dict.fromkeys(["hardware", "max_batch_size", "replicas"], why)}  # fmt: skip
        stages.append(stage)
    return {**plan, "stages": stages}
