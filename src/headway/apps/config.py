"""Applications as declared in `headway.yaml` (or a `PUT /apps/{app}` body): parsed and checked.

Every problem is a `ConfigError` that names the application and the key, so a typo fails the
start-up, not a query. docs/selection.md lists the keys.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from headway.errors import ConfigError, ModelNotFound
from headway.flows.graph import Options
from headway.flows.model_inputs import check_types
from headway.flows.source import load_flow, split_spec
from headway.repository import MAX_VERSION_DIGITS, Repository, TensorSpec
from headway.selection import Policy, make_policy
from headway.selection.kinds import KINDS

POLICIES = tuple(KINDS)
#: Sections of headway.yaml: applications, and the planner's (`headway.planning.description`).
TOP_LEVEL = ("apps", "hardware", "pipelines")
TASKS = ("classification", "regression")
#: Options that only some policies take.
POLICY_ONLY: dict[str, tuple[str, ...]] = {
    "eta": ("exp3", "exp4"),
    "min_weight": ("exp3", "exp4"),
    "tolerance": ("exp4",),
    "split": ("fixed",),
    "active": ("fixed",),
}
#: A flow application's keys: `flow` and the compiler's switches (`headway.flows.graph.Options`).
FLOW_OPTIONS = ("fusion", "compete", "compete_replicas", "batching")
FLOW_KEYS = ("flow", *FLOW_OPTIONS)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def _version_number(text: str) -> bool:
    """A version as a model reference names it: a plain positive integer a folder could bear."""
    return text.isascii() and text.isdigit() and len(text) <= MAX_VERSION_DIGITS and int(text) >= 1


@dataclass(frozen=True)
class ModelRef:
    """A model as an application links it: `name`, or `name@version` to pin one version."""

    name: str
    version: int | None = None

    @property
    def key(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"

    @classmethod
    def parse(cls, text: Any, where: str) -> ModelRef:
        if not isinstance(text, str) or not text:
            raise ConfigError(
                f"{where}: a model must be a name like 'clf' or 'clf@2', not {text!r}"
            )
        name, at, version = text.partition("@")
        if not _NAME.match(name) or (at and not _version_number(version)):
            raise ConfigError(f"{where}: {text!r} is not a model name like 'clf' or 'clf@2'")
        return cls(name, int(version) if at else None)


@dataclass(frozen=True)
class AppConfig:
    """One application: its models, policy, deadline, default output and policy options."""

    name: str
    models: tuple[str, ...]
    policy: str = "fixed"
    slo_ms: float = 1000.0
    default_output: Any = None
    confidence_threshold: float = 0.0
    personalize: bool = False
    task: str = "classification"
    scale: float | None = None
    eta: float | None = None
    min_weight: float | None = None
    tolerance: float | None = None
    split: dict[str, float] | None = field(default=None, hash=False)
    active: str | None = None
    #: A flow application (`headway.flows`): `path/file.py:object` and its compiler switches.
    flow: str | None = None
    fusion: bool | None = None
    compete: bool | None = None
    compete_replicas: int | None = None
    batching: bool | None = None

    @property
    def refs(self) -> list[ModelRef]:
        return [ModelRef.parse(model, f"app {self.name!r}: models") for model in self.models]

    def policy_options(self) -> dict[str, Any]:
        """The keyword arguments of `make_policy` for this application."""
        options: dict[str, Any] = {
            "task": self.task,
            "scale": self.scale,
            "default_output": self.default_output,
            "threshold": self.confidence_threshold,
        }
        for key in POLICY_ONLY:
            value = getattr(self, key)
            if value is not None:
                options[key] = value
        return options

    def build_policy(self) -> Policy:
        try:
            return make_policy(self.policy, list(self.models), **self.policy_options())
        except ValueError as exc:
            raise ConfigError(f"app {self.name!r}: {exc}") from None

    def flow_options(self, defaults: Options) -> Options:
        """A flow app's compiler switches: the flow's own `defaults`, overridden by the
        application's settings."""
        chosen = {key: getattr(self, key) for key in FLOW_OPTIONS if getattr(self, key) is not None}
        return replace(defaults, **chosen)

    def traffic(self) -> tuple[Any, Any]:
        """What fixes a fixed policy's split in the configuration (compared on updates)."""
        return (self.split, self.active)

    def with_model(self, model: str) -> AppConfig:
        return replace(self, models=(*self.models, model))

    def to_dict(self) -> dict[str, Any]:
        """The same shape as the YAML entry (without its name), unset options left out."""
        if self.flow is not None:
            keys = ("flow", "slo_ms", "default_output", *FLOW_OPTIONS)
            return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}
        out: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if (
                item.name == "name"
                or item.name in FLOW_KEYS
                or (item.name in POLICY_ONLY and value is None)
            ):
                continue
            out[item.name] = list(value) if item.name == "models" else value
        return out


def _number(where: str, key: str, value: Any, *, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}: {key} must be a number, not {value!r}")
    if not low <= value <= high:
        bound = f"at least {low:g}" if high == math.inf else f"within [{low:g}, {high:g}]"
        raise ConfigError(f"{where}: {key} must be {bound}, not {value!r}")
    return float(value)


def parse_app(
    name: str, raw: Any, repository: Repository | None = None, base: Path | None = None
) -> AppConfig:
    """One application entry -> AppConfig; ConfigError naming the app and the key. A relative
    flow path is taken from `base` (the config file's folder), else from the repository's
    folder; with a repository, the flow file must lie in it or in `base` (`parse_flow_app`)."""
    where = f"app {name!r}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: an app name may use letters, digits, '_', '-', '.'")
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a mapping with at least 'models', not {raw!r}")
    if "flow" in raw:
        return parse_flow_app(name, raw, repository, base)
    known = {item.name for item in fields(AppConfig)} - {"name", *FLOW_KEYS}
    unknown = sorted(str(key) for key in raw if key not in known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    models = raw.get("models")
    if not isinstance(models, list | tuple) or not models:
        raise ConfigError(f"{where}: models must be a non-empty list of model names")
    refs = [ModelRef.parse(model, f"{where}: models") for model in models]
    keys = [ref.key for ref in refs]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{where}: models lists a model twice: {keys}")
    policy = raw.get("policy", "fixed")
    if policy not in POLICIES:
        raise ConfigError(f"{where}: policy must be one of {list(POLICIES)}, not {policy!r}")
    for key, policies in POLICY_ONLY.items():
        if raw.get(key) is not None and policy not in policies:
            raise ConfigError(f"{where}: {key} applies to policy {' or '.join(policies)} only")
    task = raw.get("task", "classification")
    if task not in TASKS:
        raise ConfigError(f"{where}: task must be one of {list(TASKS)}, not {task!r}")
    personalize = raw.get("personalize", False)
    if not isinstance(personalize, bool):
        raise ConfigError(f"{where}: personalize must be true or false, not {personalize!r}")
    optional: dict[str, Any] = {
        key: None if raw.get(key) is None else _number(where, key, raw[key], low=low, high=high)
        for key, low, high in (
            ("scale", 1e-300, math.inf),
            ("eta", 1e-300, math.inf),
            ("min_weight", 1e-300, 1.0 - 1e-12),
            ("tolerance", 0.0, math.inf),
        )
    }
    split = raw.get("split")
    if split is not None:
        if not isinstance(split, Mapping) or not split:
            raise ConfigError(f"{where}: split must map models to traffic weights")
        split = {str(m): _number(where, f"split[{m}]", w, low=0.0) for m, w in split.items()}
    active = raw.get("active")
    if active is not None and active not in keys:
        raise ConfigError(f"{where}: active must be one of its models {keys}, not {active!r}")
    config = AppConfig(
        name=name,
        models=tuple(keys),
        policy=policy,
        slo_ms=_number(where, "slo_ms", raw.get("slo_ms", 1000.0), low=1e-3),
        default_output=raw.get("default_output"),
        confidence_threshold=_number(
            where, "confidence_threshold", raw.get("confidence_threshold", 0.0), low=0.0, high=1.0
        ),
        personalize=personalize,
        task=task,
        split=split,
        active=active,
        **optional,
    )
    config.build_policy()  # the policy's own checks (split names, both split and active, ...)
    if repository is not None:
        check_models(config, repository)
    return config


def parse_flow_app(
    name: str, raw: Mapping[str, Any], repository: Repository | None, base: Path | None
) -> AppConfig:
    """A flow application: `flow: path/file.py:object`, `slo_ms` (the whole flow's deadline),
    `default_output` (the answer of a query that cannot make it) and compiler switches."""
    where = f"app {name!r}"
    known = {*FLOW_KEYS, "slo_ms", "default_output"}
    unknown = sorted(str(key) for key in raw if key not in known)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown} for a flow app; known: {sorted(known)}"
        )
    spec = raw["flow"]
    if not isinstance(spec, str):
        raise ConfigError(f"{where}: flow must be 'path/file.py:name', not {spec!r}")
    if repository is None:  # an offline tool (`headway plan`): the user's own files
        path, attr = split_spec(spec, where, base)
    else:  # a server: the API may name only the repository's files, the config file also its own
        within = (repository.root,) if base is None else (repository.root, base)
        path, attr = split_spec(spec, where, base or repository.root, within)
    switches: dict[str, Any] = {}
    for key in ("fusion", "compete", "batching"):
        if raw.get(key) is not None:
            if not isinstance(raw[key], bool):
                raise ConfigError(f"{where}: {key} must be true or false, not {raw[key]!r}")
            switches[key] = raw[key]
    if raw.get("compete_replicas") is not None:
        switches["compete_replicas"] = int(
            _number(where, "compete_replicas", raw["compete_replicas"], low=1, high=16)
        )
    config = AppConfig(
        name=name,
        models=(),
        slo_ms=_number(where, "slo_ms", raw.get("slo_ms", 1000.0), low=1e-3),
        default_output=raw.get("default_output"),
        flow=f"{path}:{attr}",
        **switches,
    )
    if repository is not None:
        check_flow(config, repository)
    return config


def check_flow(config: AppConfig, repository: Repository, base: Path | None = None) -> None:
    """A flow app's flow builds, and the models it calls are in the repository."""
    assert config.flow is not None
    where = f"app {config.name!r}"
    flow = load_flow(config.flow, where, base)
    plan = flow.compile(config.flow_options(flow.options))
    for stage in plan.stages:
        for key in stage.models:
            ref = ModelRef.parse(key, f"{where}: flow model")
            if ref.name not in repository:
                raise ConfigError(
                    f"{where}: the flow calls model {key!r}, which is not in the repository"
                )
    check_types(flow, partial(_declared, repository), where)


def _declared(repository: Repository, key: str) -> tuple[TensorSpec, ...]:
    """A model's inputs as its model.yaml declares them (empty: inferred when it loads)."""
    found = repository.models.get(ModelRef.parse(key, f"model {key!r}").name)
    return () if found is None else tuple(found.inputs)


def check_models(config: AppConfig, repository: Repository) -> None:
    """Every linked model (and pinned version) must be in the repository."""
    for ref in config.refs:
        where = f"app {config.name!r}: models: {ref.key!r}"
        if ref.name in repository.broken:
            raise ConfigError(f"{where}: cannot be served: {repository.broken[ref.name]}")
        model = repository.models.get(ref.name)
        if model is None:
            raise ConfigError(
                f"{where}: no such model; the repository has {sorted(repository.models)}"
            )
        if ref.version is not None and ref.version not in model.versions:
            try:  # a version folder added since the scan counts
                repository.version(ref.name, ref.version)
            except ModelNotFound:
                versions = list(repository.models[ref.name].versions)
                raise ConfigError(f"{where}: no version {ref.version}; it has {versions}") from None


def parse_apps(
    document: Any, repository: Repository | None = None, base: Path | None = None
) -> dict[str, AppConfig]:
    """The `apps:` section of a configuration document (unknown top-level keys are refused)."""
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigError("the configuration must be a mapping with an 'apps:' section")
    unknown = sorted(str(key) for key in document if key not in TOP_LEVEL)
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {unknown}; expected {list(TOP_LEVEL)}")
    apps = document.get("apps") or {}
    if not isinstance(apps, Mapping):
        raise ConfigError("apps: must map application names to their settings")
    return {str(name): parse_app(str(name), raw, repository, base) for name, raw in apps.items()}


def load_config(path: Path, repository: Repository | None = None) -> dict[str, AppConfig]:
    """Read a `headway.yaml`; errors name the file, the application and the key."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    try:
        return parse_apps(document, repository, Path(path).parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc.message}") from None
