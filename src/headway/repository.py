"""The model repository: a folder of `<model>/model.yaml` and `<model>/<version>/<artifact>`.

A minimal model.yaml is one line, `framework: sklearn`; everything else is inferred or defaulted.
This module reads the folder into typed `ModelConfig`s and nothing more: loading happens in
workers, scheduling in the controller.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from headway.datatypes import OIP_TO_NUMPY
from headway.errors import ConfigError, ModelNotFound
from headway.resources import DEFAULT, Resources, parse_resources

_FRAMEWORK_LINE = re.compile(r"^framework:\s*(\S+)", re.MULTILINE)

FRAMEWORKS = ("python", "sklearn", "torch", "onnx", "xgboost", "lightgbm")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
#: A version is a folder's name, so it has at most this many digits (a file name's limit).
MAX_VERSION_DIGITS = 255
_KNOWN_KEYS = {
    "framework",
    "inputs",
    "outputs",
    "max_batch_size",
    "batch_delay_ms",
    "slo_ms",
    "replicas",
    "entrypoint",
    "cache",
    "version",
    "memory_mb",
    "max_queue",
    "options",
    "resources",
    "ttft_ms",
    "tpot_ms",
    "generative",
}
#: How a generative model's steps are batched: each step re-formed (Orca's iteration level,
#: the default), or a batch held until its longest sequence ends (the baseline).
ITERATION, REQUEST = "iteration", "request"
#: A generative model's sequences held at once on a worker unless model.yaml says otherwise
#: (vLLM's `max_num_seqs` defaults to 256 on a GPU; a CPU worker runs far fewer well).
DEFAULT_MAX_SEQUENCES = 8
#: The most parts (tokens) one sequence makes unless model.yaml says otherwise (OpenAI's
#: completions default `max_tokens` to 16; Triton's generate leaves it to the model).
DEFAULT_MAX_PARTS = 64


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor with an OIP datatype and a shape (-1 marks a free dimension)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}

    @classmethod
    def parse(cls, raw: Any, where: str) -> TensorSpec:
        if not isinstance(raw, dict) or "name" not in raw:
            raise ConfigError(f"{where}: each tensor needs at least a name, got {raw!r}")
        datatype = str(raw.get("datatype", "FP32")).upper()
        if datatype not in OIP_TO_NUMPY:
            raise ConfigError(f"{where}: tensor {raw['name']!r} has unknown datatype {datatype!r}")
        shape = raw.get("shape", [-1])
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= -1 for d in shape):
            raise ConfigError(f"{where}: tensor {raw['name']!r} shape must be a list of ints >= -1")
        return cls(str(raw["name"]), datatype, tuple(shape))


@dataclass(frozen=True)
class Generation:
    """How a generative model's sequences are held and batched (model.yaml's `generative:`).

    `max_sequences` is the memory bound: the sequences one worker holds at once, each with its
    state (a key/value cache); a sequence that finds them all taken waits for one to end, and
    is refused at once when none would end in time for its first part. `max_parts` is the most
    parts a sequence makes (a request's `max_tokens` may ask for fewer). `batching` is
    `iteration` (each step re-formed: a finished sequence leaves at once, a new one joins at
    the next step) or `request` (a batch runs until its longest sequence ends: the baseline)."""

    max_sequences: int = DEFAULT_MAX_SEQUENCES
    max_parts: int = DEFAULT_MAX_PARTS
    batching: str = ITERATION

    def to_json(self) -> dict[str, Any]:
        return {
            "max_sequences": self.max_sequences,
            "max_parts": self.max_parts,
            "batching": self.batching,
        }

    @classmethod
    def parse(cls, raw: Any, where: str) -> Generation:
        if raw is True or raw == {}:
            return cls()
        if not isinstance(raw, dict):
            raise ConfigError(
                f"{where}: generative must be a mapping like "
                "{max_sequences: 8, max_parts: 64, batching: iteration}, or true"
            )
        unknown = set(raw) - {"max_sequences", "max_parts", "batching"}
        if unknown:
            raise ConfigError(
                f"{where}: generative has unknown keys {sorted(unknown)}; known: "
                "['batching', 'max_parts', 'max_sequences']"
            )
        counts = {}
        for key, default in (
            ("max_sequences", DEFAULT_MAX_SEQUENCES),
            ("max_parts", DEFAULT_MAX_PARTS),
        ):
            value = raw.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"{where}: generative.{key} must be an integer >= 1, got {value!r}"
                )
            counts[key] = value
        batching = raw.get("batching", ITERATION)
        if batching not in (ITERATION, REQUEST):
            raise ConfigError(
                f"{where}: generative.batching must be {ITERATION!r} or {REQUEST!r}, "
                f"got {batching!r}"
            )
        return cls(counts["max_sequences"], counts["max_parts"], batching)


@dataclass(frozen=True)
class ModelConfig:
    """One model version as the repository describes it."""

    name: str
    version: int
    framework: str
    path: Path
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    max_batch_size: int = 32
    batch_delay_ms: float = 0.0
    slo_ms: float = 1000.0
    replicas: int = 1
    max_queue: int = 4096
    entrypoint: str | None = None
    cache: bool = False
    memory_mb: float | None = None
    versions: tuple[int, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    #: What each of its workers needs from a node (the Ray engine places workers by it).
    resources: Resources = DEFAULT
    #: Its answers come in parts (a generator `predict`, known once loaded; or generative).
    streams: bool = False
    #: The time-to-first-part and time-per-part targets of its streams (milliseconds; None:
    #: the first part by `slo_ms`, no per-part target). A request may set its own.
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    #: A generative model's sequences (`Generation`); None: it answers each batch in one call.
    generative: Generation | None = None

    @cached_property
    def key(self) -> str:
        """The identity of a loaded model: name and version (computed once: the request path
        reads it on every request)."""
        return f"{self.name}@{self.version}"

    @property
    def platform(self) -> str:
        return {"torch": "pytorch_torchscript", "onnx": "onnxruntime_onnx"}.get(
            self.framework, f"{self.framework}_headway"
        )

    def with_signature(
        self, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]
    ) -> ModelConfig:
        """Fill the signature where model.yaml left it out (inferred by the adapter)."""
        return replace(self, inputs=self.inputs or inputs, outputs=self.outputs or outputs)

    def to_wire(self) -> dict[str, Any]:
        """What a worker needs to load this model."""
        return {
            "name": self.name,
            "version": self.version,
            "framework": self.framework,
            "path": str(self.path),
            "entrypoint": self.entrypoint,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "options": self.options,
            "generative": None if self.generative is None else self.generative.to_json(),
        }


def _positive(raw: dict[str, Any], key: str, default: float, where: str) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where}: {key} must be a non-negative number, got {value!r}")
    return float(value)


def _tensors(raw: dict[str, Any], key: str, where: str) -> tuple[TensorSpec, ...]:
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise ConfigError(
            f"{where}: {key} must be a list of tensors like {{name, datatype, shape}}, "
            f"got {value!r}"
        )
    return tuple(TensorSpec.parse(t, where) for t in value)


def _slo(raw: dict[str, Any], where: str) -> float:
    slo = _positive(raw, "slo_ms", 1000.0, where)
    if slo == 0:
        raise ConfigError(f"{where}: slo_ms must be above 0 (every request would be refused)")
    return slo


def version_folders(model_dir: Path) -> tuple[int, ...]:
    """The model's versions: its folders named by a plain integer (`1`, `2`; not `01`)."""
    try:
        entries = list(model_dir.iterdir())
    except OSError:
        return ()
    return tuple(
        sorted(
            int(p.name)
            for p in entries
            if p.is_dir() and p.name.isascii() and p.name.isdigit() and p.name == str(int(p.name))
        )
    )


def confined(path: Path, folder: Path, where: str) -> Path:
    """`path` with its links followed; ConfigError when that leaves `folder` (a model may reach
    only what lies inside its own folder: `docs/security.md`)."""
    real = path.resolve()
    inside = folder.resolve()
    if not real.is_relative_to(inside):
        raise ConfigError(
            f"{where}: {path} resolves to {real}, outside {inside}; a model may only use "
            "files inside its own folder"
        )
    return real


def read_model(model_dir: Path) -> ModelConfig:
    """Read one `<model>/model.yaml` and pick the version to serve (highest unless pinned)."""
    where = str(model_dir / "model.yaml")
    name = model_dir.name
    if not _NAME.match(name):
        raise ConfigError(f"{where}: model name {name!r} may use letters, digits, '_', '-', '.'")
    # A model folder linked from elsewhere in the repository is fine; one that leads out is not.
    confined(model_dir, model_dir.parent, f"model {name!r}")
    confined(model_dir / "model.yaml", model_dir, f"model {name!r}")
    try:
        raw = yaml.safe_load((model_dir / "model.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{where}: cannot be read: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping like 'framework: sklearn'")
    unknown = set(raw) - _KNOWN_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(_KNOWN_KEYS)}")
    framework = raw.get("framework")
    if framework not in FRAMEWORKS:
        raise ConfigError(
            f"{where}: framework must be one of {list(FRAMEWORKS)}, got {framework!r}"
        )
    versions = version_folders(model_dir)
    if not versions:
        raise ConfigError(f"{where}: no version folder (e.g. {name}/1/) holds an artifact")
    version = raw.get("version", versions[-1])
    if version not in versions:
        raise ConfigError(f"{where}: pinned version {version!r} is not among {list(versions)}")
    confined(model_dir / str(version), model_dir, where)
    entrypoint = raw.get("entrypoint")
    if framework == "python":
        if not entrypoint or not isinstance(entrypoint, str):
            raise ConfigError(f"{where}: framework 'python' needs 'entrypoint: file.py:ClassName'")
        entry_files(model_dir / str(version), entrypoint, where)
    max_batch = int(_positive(raw, "max_batch_size", 32, where))
    replicas = int(_positive(raw, "replicas", 1, where))
    if max_batch < 1 or replicas < 1:
        raise ConfigError(f"{where}: max_batch_size and replicas must be at least 1")
    memory = raw.get("memory_mb")
    generative = raw.get("generative")
    generation = None if generative in (None, False) else Generation.parse(generative, where)
    if generation is not None and framework != "python":
        raise ConfigError(f"{where}: generative models are framework 'python' (start/step/stop)")
    targets = {}
    for key in ("ttft_ms", "tpot_ms"):
        if raw.get(key) is not None:
            targets[key] = _positive(raw, key, 0.0, where)
            if targets[key] == 0:
                raise ConfigError(f"{where}: {key} must be above 0 (every stream would be refused)")
    options = raw.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError(f"{where}: options must be a mapping, got {options!r}")
    return ModelConfig(
        name=name,
        version=int(version),
        framework=framework,
        path=model_dir / str(version),
        inputs=_tensors(raw, "inputs", where),
        outputs=_tensors(raw, "outputs", where),
        max_batch_size=max_batch,
        batch_delay_ms=_positive(raw, "batch_delay_ms", 0.0, where),
        slo_ms=_slo(raw, where),
        replicas=replicas,
        max_queue=int(_positive(raw, "max_queue", 4096, where)),
        entrypoint=entrypoint,
        cache=bool(raw.get("cache", False)),
        memory_mb=None if memory is None else _positive(raw, "memory_mb", 0, where),
        versions=versions,
        options=dict(options),
        resources=parse_resources(raw.get("resources"), where),
        streams=generation is not None,
        ttft_ms=targets.get("ttft_ms"),
        tpot_ms=targets.get("tpot_ms"),
        generative=generation,
    )


def entry_files(version_dir: Path, entrypoint: str, where: str) -> list[Path]:
    """Where a Python model's entrypoint file may be, in the order it is looked for: the
    version folder, then the model folder. Refused: an absolute path, and one that resolves
    outside the model folder (through `..` or a link)."""
    file_name = entrypoint.rpartition(":")[0]
    if Path(file_name).is_absolute():
        raise ConfigError(
            f"{where}: entrypoint {entrypoint!r} is an absolute path; name a file inside the "
            "model's folder (e.g. 'model.py:Model')"
        )
    model_dir = version_dir.parent
    candidates = [version_dir / file_name, model_dir / file_name]
    for candidate in candidates:
        if candidate.exists() or candidate.is_symlink():
            confined(candidate, model_dir, f"{where}: entrypoint {entrypoint!r}")
    return candidates


@dataclass
class Repository:
    """A scanned repository folder: every model it holds, and why any could not be read.

    A lazy scan only lists the model folders, so a repository of thousands of models starts
    without reading them; each model.yaml is read the first time the model is asked for.
    """

    root: Path
    models: dict[str, ModelConfig] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)

    @classmethod
    def scan(cls, root: Path, *, lazy: bool = False) -> Repository:
        root = Path(root)
        if not root.is_dir():
            raise ConfigError(f"model repository {str(root)!r} is not a folder")
        repo = cls(root)
        with os.scandir(root) as entries:
            repo.names = sorted(
                e.name for e in entries if e.is_dir() and os.path.isfile(f"{e.path}/model.yaml")
            )
        if not lazy:
            for name in repo.names:
                repo._read(name)
        return repo

    def _read(self, name: str) -> ModelConfig | None:
        try:
            config = self.models[name] = read_model(self.root / name)
            return config
        except ConfigError as exc:
            self.broken[name] = exc.message
            return None

    def frameworks(self) -> list[str]:
        """Every framework the repository's models use, so workers can import them at start.

        A lazy index reads no model.yaml; here only each one's `framework:` line is looked
        for (a model.yaml that does not name one is a broken model, served by nobody).
        """
        found = {config.framework for config in self.models.values()}
        for name in self.names:
            if name not in self.models and name not in self.broken:
                try:
                    text = (self.root / name / "model.yaml").read_text(errors="replace")
                except OSError:
                    continue
                match = _FRAMEWORK_LINE.search(text)
                if match:
                    found.add(match.group(1).strip("'\""))
        return sorted(found)

    def __contains__(self, name: str) -> bool:
        return name in self.models or name in self._index

    @property
    def _index(self) -> set[str]:
        index = self.__dict__.get("_index_set")
        if index is None or len(index) != len(self.names):
            index = self.__dict__["_index_set"] = set(self.names)
        return index

    def get(self, name: str) -> ModelConfig:
        config = self.models.get(name)
        if config is not None:
            return config
        if name in self._index and name not in self.broken:
            config = self._read(name)
            if config is not None:
                return config
        if name in self.broken:
            raise ModelNotFound(f"model {name!r} cannot be served: {self.broken[name]}")
        known = self.names if len(self.names) <= 20 else [*self.names[:20], "..."]
        raise ModelNotFound(f"unknown model {name!r}; the repository has {known}")

    def version(self, name: str, version: int) -> ModelConfig:
        """A specific version of a model (servable beside the default one), sharing the
        default's model.yaml. A version folder added since the scan is found: the folder is
        listed again when asked for a version not seen before."""
        config = self.get(name)
        if version == config.version:
            return config
        if version not in config.versions:
            found = version_folders(self.root / name)
            if found and found != config.versions:
                config = self.models[name] = replace(config, versions=found)
            if version not in config.versions:
                raise ModelNotFound(
                    f"model {name!r} has no version {version}; it has {list(config.versions)} "
                    f"(version {config.version} is the default)"
                )
        return replace(config, version=version, path=config.path.parent / str(version))
