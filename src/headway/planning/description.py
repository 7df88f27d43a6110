"""Reading what the planner needs from files: hardware, pipelines, imported profiles, traces.

The `hardware:` and `pipelines:` sections of `headway.yaml`, a profiles file (`headway profile
--import`, `headway plan --profiles`: JSON or YAML, `{"profiles": [{"model", "hardware",
"batch_size", "mean_ms", "p50_ms"?, "p99_ms"?, "spread"?, "p99_spread"?}]}`) and a trace (`headway trace`'s CSV or a
JSON list of arrival seconds); docs/planning.md shows each. Every problem is a ConfigError
naming the file and the key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from headway.errors import ConfigError
from headway.planning.pipeline import Catalogue, Hardware, LatencyProfile, Pipeline, Stage
from headway.store.profiles import MeasuredProfile
from headway.traces import read

#: The catalogue when a config declares none: CPU workers with 1 or 2 threads, priced per core.
DEFAULT_CATALOGUE = Catalogue(
    {
        "cpu1": Hardware("cpu1", 0.05, cpus=1, threads=1),
        "cpu2": Hardware("cpu2", 0.10, cpus=2, threads=2),
    }
)
HARDWARE_KEYS = ("cost_per_hour", "cpus", "threads", "gpu")
STAGE_KEYS = ("name", "model", "parents", "scale")


def read_document(path: Path) -> Any:
    """A YAML or JSON file's content (JSON is YAML), or a ConfigError naming the file."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    return float(value)


def parse_catalogue(raw: Any, where: str = "hardware") -> Catalogue:
    kinds: dict[str, Hardware] = {}
    for name, entry in _mapping(raw, where).items():
        spot = f"{where}.{name}"
        entry = _mapping(entry, spot)
        unknown = sorted(set(entry) - set(HARDWARE_KEYS))
        if unknown:
            raise ConfigError(f"{spot}: unknown key(s) {unknown}; expected {list(HARDWARE_KEYS)}")
        if "cost_per_hour" not in entry:
            raise ConfigError(f"{spot}: cost_per_hour is required")
        kinds[str(name)] = Hardware(
            str(name),
            _number(entry["cost_per_hour"], f"{spot}.cost_per_hour"),
            cpus=_number(entry.get("cpus", 1), f"{spot}.cpus"),
            threads=int(_number(entry.get("threads", 1), f"{spot}.threads")),
            gpu=str(entry["gpu"]) if entry.get("gpu") is not None else None,
        )
    if not kinds:
        raise ConfigError(f"{where}: the catalogue lists no hardware")
    return Catalogue(kinds)


def parse_pipeline(name: str, raw: Any, where: str = "pipelines") -> Pipeline:
    spot = f"{where}.{name}"
    stages_raw = _mapping(raw, spot).get("stages")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise ConfigError(f"{spot}: stages must be a non-empty list")
    stages: list[Stage] = []
    for number, entry in enumerate(stages_raw):
        at = f"{spot}.stages[{number}]"
        entry = _mapping(entry, at)
        unknown = sorted(set(entry) - set(STAGE_KEYS))
        if unknown:
            raise ConfigError(f"{at}: unknown key(s) {unknown}; expected {list(STAGE_KEYS)}")
        if not entry.get("model"):
            raise ConfigError(f"{at}: model is required")
        parents = entry.get("parents", [])
        if not isinstance(parents, list):
            raise ConfigError(f"{at}: parents must be a list of stage names")
        stages.append(
            Stage(
                str(entry.get("name", entry["model"])),
                str(entry["model"]),
                tuple(str(p) for p in parents),
                _number(entry.get("scale", 1.0), f"{at}.scale"),
            )
        )
    try:
        return Pipeline(name, tuple(stages))
    except ConfigError as exc:
        raise ConfigError(f"{spot}: {exc.message}") from None


def load_planning(path: Path) -> tuple[Catalogue, dict[str, Pipeline]]:
    """The catalogue (the default one when none is declared) and pipelines of a headway.yaml."""
    document = read_document(path) or {}
    try:
        document = _mapping(document, "the configuration")
        catalogue = (
            parse_catalogue(document["hardware"]) if "hardware" in document else DEFAULT_CATALOGUE
        )
        pipelines = {
            str(name): parse_pipeline(str(name), raw)
            for name, raw in _mapping(document.get("pipelines") or {}, "pipelines").items()
        }
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc.message}") from None
    return catalogue, pipelines


def read_profile_rows(path: Path) -> list[MeasuredProfile]:
    """The rows of a profiles file (see the module docstring), marked imported."""
    document = read_document(path)
    rows_raw = document.get("profiles") if isinstance(document, Mapping) else None
    if not isinstance(rows_raw, list):
        raise ConfigError(f"{path}: expected a mapping with a 'profiles' list")
    rows: list[MeasuredProfile] = []
    for number, entry in enumerate(rows_raw):
        at = f"{path}: profiles[{number}]"
        entry = _mapping(entry, at)
        missing = [k for k in ("model", "hardware", "batch_size", "mean_ms") if k not in entry]
        if missing:
            raise ConfigError(f"{at}: missing {missing}")

        def ms(key: str, entry: Mapping[str, Any] = entry, at: str = at) -> float | None:
            value = entry.get(key)
            return None if value is None else _number(value, f"{at}.{key}") / 1e3

        mean = _number(entry["mean_ms"], f"{at}.mean_ms") / 1e3
        batch = int(_number(entry["batch_size"], f"{at}.batch_size"))
        if batch < 1 or mean <= 0:
            raise ConfigError(f"{at}: batch_size must be >= 1 and mean_ms > 0")
        rows.append(
            MeasuredProfile(
                str(entry["model"]),
                str(entry["hardware"]),
                batch,
                mean,
                ms("p50_ms"),
                ms("p99_ms"),
                source="imported",
                spread=_share(entry.get("spread"), f"{at}.spread"),
                p99_spread=_share(entry.get("p99_spread"), f"{at}.p99_spread"),
            )
        )
    return rows


def _share(value: Any, at: str) -> float | None:
    """An optional share (a spread: 0.1 for 10%), checked."""
    if value is None:
        return None
    share = _number(value, at)
    if share < 0:
        raise ConfigError(f"{at}: must be >= 0")
    return share


def profile_rows_document(rows: Iterable[MeasuredProfile]) -> dict[str, Any]:
    """Rows as a profiles file holds them (what `read_profile_rows` reads back)."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1e3, 4)

    return {
        "profiles": [
            {
                "model": r.model,
                "hardware": r.hardware,
                "batch_size": r.batch_size,
                "mean_ms": ms(r.mean),
                "p50_ms": ms(r.p50),
                "p99_ms": ms(r.p99),
                "throughput": None if r.throughput is None else round(r.throughput, 3),
                "spread": None if r.spread is None else round(r.spread, 4),
                "p99_spread": None if r.p99_spread is None else round(r.p99_spread, 4),
            }
            for r in rows
        ]
    }


def profiles_from_rows(rows: Iterable[MeasuredProfile]) -> dict[str, dict[str, LatencyProfile]]:
    """Rows grouped into a `LatencyProfile` (mean seconds per batch) per (model, hardware)."""
    means: dict[tuple[str, str], dict[int, float]] = {}
    p99s: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        means.setdefault((row.model, row.hardware), {})[row.batch_size] = row.mean
        if row.p99 is not None:
            p99s.setdefault((row.model, row.hardware), {})[row.batch_size] = row.p99
    profiles: dict[str, dict[str, LatencyProfile]] = {}
    for (model, hardware), seconds in means.items():
        profiles.setdefault(model, {})[hardware] = LatencyProfile(
            seconds, p99s.get((model, hardware), {})
        )
    return profiles


def read_arrivals(path: Path) -> np.ndarray:
    """Arrival seconds, sorted, from `headway trace`'s CSV or a JSON list (or {"arrivals": [...]})."""
    if Path(path).suffix.lower() == ".csv":
        try:
            _header, rows = read(Path(path))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot be read: {exc}") from None
        times = [row[0] for row in rows]
    else:
        try:
            document = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot be read: {exc}") from None
        if isinstance(document, Mapping):
            document = document.get("arrivals")
        if not isinstance(document, list) or not all(
            isinstance(t, int | float) and not isinstance(t, bool) for t in document
        ):
            raise ConfigError(f"{path}: expected a list of arrival times in seconds")
        times = [float(t) for t in document]
    if len(times) < 2:
        raise ConfigError(f"{path}: a planning trace needs at least two arrivals")
    return np.sort(np.asarray(times, dtype=np.float64))
