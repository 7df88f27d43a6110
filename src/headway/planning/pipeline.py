"""What the planner plans: a pipeline of models, the hardware it may use, and a configuration.

A `Pipeline` is a DAG of `Stage`s; a `Catalogue` lists the hardware kinds with their price;
`Profiles` hold each model's measured latency per (hardware, batch size); a `Configuration`
gives each stage a hardware kind, a max batch size and a replica count, and costs the sum of
its replicas' hourly prices.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from headway.errors import ConfigError


@dataclass(frozen=True)
class Hardware:
    """One kind of replica: what it costs and what it holds (a CPU worker with `threads`
    threads, or a worker with a `gpu`)."""

    name: str
    cost_per_hour: float
    cpus: float = 1.0
    threads: int = 1
    gpu: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a hardware kind needs a name")
        if not (self.cost_per_hour >= 0 and math.isfinite(self.cost_per_hour)):
            raise ConfigError(f"hardware {self.name!r}: cost_per_hour must be >= 0")
        if self.threads < 1 or self.cpus <= 0:
            raise ConfigError(f"hardware {self.name!r}: cpus and threads must be positive")


@dataclass(frozen=True)
class Catalogue:
    """The hardware kinds a plan may use, by name."""

    kinds: Mapping[str, Hardware]

    def __getitem__(self, name: str) -> Hardware:
        try:
            return self.kinds[name]
        except KeyError:
            raise ConfigError(
                f"hardware {name!r} is not in the catalogue ({', '.join(sorted(self.kinds))})"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self.kinds

    def __iter__(self) -> Iterator[str]:
        return iter(self.kinds)


@dataclass(frozen=True)
class LatencyProfile:
    """One model on one hardware kind: seconds per batch, by measured batch size.

    `persistence` (0 to below 1): how much of a batch's luck the next batch of the model
    keeps -- the correlation of successive batches' log-times, a spread estimate's draws
    following it (slow batches come in spells where the cores are shared); 0: independent."""

    seconds: Mapping[int, float]
    p99: Mapping[int, float] = field(default_factory=dict)
    persistence: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.persistence < 1.0:
            raise ConfigError(f"a profile's persistence must be in [0, 1), not {self.persistence}")
        if not self.seconds:
            raise ConfigError("a latency profile needs at least one batch size")
        if any(b < 1 or not (s > 0) for b, s in self.seconds.items()):
            raise ConfigError("profile batch sizes must be >= 1 and latencies > 0")

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(self.seconds)

    def latency(self, batch: int) -> float:
        """Seconds for a batch of `batch` rows: measured, else the next measured size up,
        else extrapolated per row from the largest measured."""
        sizes = self.batch_sizes
        above = bisect.bisect_left(sizes, batch)
        if above < len(sizes):
            return self.seconds[sizes[above]]
        return self.seconds[sizes[-1]] * batch / sizes[-1]

    def tail(self, batch: int) -> float | None:
        """The measured p99 seconds for `batch` rows, looked up as `latency` is; None when
        the profile has no p99s."""
        if not self.p99:
            return None
        sizes = sorted(self.p99)
        above = bisect.bisect_left(sizes, batch)
        if above < len(sizes):
            return self.p99[sizes[above]]
        return self.p99[sizes[-1]] * batch / sizes[-1]

    def throughput(self, batch: int) -> float:
        """Rows per second of one replica that always runs full batches of `batch`."""
        return batch / self.latency(batch)


#: model -> hardware -> profile
Profiles = Mapping[str, Mapping[str, LatencyProfile]]


@dataclass(frozen=True)
class Stage:
    """One model of the pipeline, its parents (none: it takes the pipeline's input) and the
    share of queries that reach it."""

    name: str
    model: str
    parents: tuple[str, ...] = ()
    scale: float = 1.0


@dataclass(frozen=True)
class Pipeline:
    """Stages in an order where parents come first (checked).

    Each stage runs one model; its `scale` is the share of the pipeline's queries that reach it
    (InferLine's scale factor s_m: 1 for every query, 0.3 for a cascade's second model that sees
    the uncertain 30%). A stage with several parents is a join: it runs once every parent has
    answered. Shares nest: a query that reaches a stage of share s reaches every stage of share
    >= s on its paths (one uncertainty draw per query, as a cascade's uncertain rows stay the same
    rows all the way down), so a stage's share is at most its parents'. A query that reaches no
    stage (a flow's filter dropped it first) is answered at once."""

    name: str
    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        if not self.stages:
            raise ConfigError(f"pipeline {self.name!r} has no stages")
        seen: dict[str, Stage] = {}
        for stage in self.stages:
            where = f"pipeline {self.name!r}, stage {stage.name!r}"
            if stage.name in seen:
                raise ConfigError(f"{where}: the name is used twice")
            if not (0 < stage.scale <= 1):
                raise ConfigError(f"{where}: scale must be in (0, 1], got {stage.scale}")
            for parent in stage.parents:
                if parent not in seen:
                    raise ConfigError(f"{where}: parent {parent!r} must be a stage listed before")
                if stage.scale > seen[parent].scale + 1e-12:
                    raise ConfigError(
                        f"{where}: scale {stage.scale} exceeds parent {parent!r}'s "
                        f"{seen[parent].scale} (a stage sees only queries its parents passed on)"
                    )
            seen[stage.name] = stage

    def __getitem__(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise ConfigError(f"pipeline {self.name!r} has no stage {name!r}")

    @property
    def names(self) -> list[str]:
        return [stage.name for stage in self.stages]

    def children(self, name: str) -> list[str]:
        return [s.name for s in self.stages if name in s.parents]

    def critical_path(self, seconds: Mapping[str, float]) -> float:
        """The longest sum of `seconds` along any path from an input stage to an output."""
        done: dict[str, float] = {}
        for stage in self.stages:
            done[stage.name] = seconds[stage.name] + max(
                (done[p] for p in stage.parents), default=0.0
            )
        return max(done.values())


@dataclass(frozen=True)
class StageConfig:
    """How one stage is served: on which hardware, up to which batch, on how many replicas."""

    hardware: str
    max_batch: int = 1
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.replicas < 1:
            raise ConfigError("max_batch and replicas must be at least 1")


@dataclass(frozen=True)
class Configuration:
    """A `StageConfig` per stage name."""

    stages: Mapping[str, StageConfig]

    def __getitem__(self, name: str) -> StageConfig:
        return self.stages[name]

    def with_stage(self, name: str, **changes: object) -> Configuration:
        """This configuration with one stage's fields changed."""
        updated = dict(self.stages)
        updated[name] = replace(self.stages[name], **changes)  # type: ignore[arg-type]
        return Configuration(updated)

    def cost(self, catalogue: Catalogue) -> float:
        """Dollars per hour: every replica's hardware price."""
        return sum(c.replicas * catalogue[c.hardware].cost_per_hour for c in self.stages.values())


def profile_of(profiles: Profiles, model: str, hardware: str) -> LatencyProfile:
    """The profile of `model` on `hardware`, or a ConfigError saying what to profile."""
    try:
        return profiles[model][hardware]
    except KeyError:
        raise ConfigError(
            f"no profile of model {model!r} on hardware {hardware!r}: run `headway profile` "
            "or import one with `headway profile --import`"
        ) from None
