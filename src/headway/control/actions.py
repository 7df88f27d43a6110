"""What the scheduler hands to workers and to its caller: actions, one poll's decisions, and
the counts of what it caused.

Plain data, shared by the scheduler, the controller and the simulated worker, so none of them
depends on how the scheduler decides.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from headway.control.jobs import Job, Sequence
from headway.errors import HeadwayError

INFER, LOAD, UNLOAD = "infer", "load", "unload"
#: One step of a generative model on a worker: every sequence it holds makes one part, the
#: sequences the step starts first (docs/streams.md).
STEP = "step"


@dataclass(eq=False)
class StepPlan:
    """What a STEP carries beyond the sequences it starts (`Dispatch.requests`): every
    sequence it runs, in order (those it starts last), the sequences to stop first (by
    number: withdrawn), and its shape as its duration is predicted and learnt: sequences,
    their total length, and the units of the inputs it starts (their prefill)."""

    run: list[Sequence]
    stops: list[int]
    sequences: int
    context: int
    prefill: int


@dataclass(eq=False)
class Dispatch:
    """One action handed to one worker."""

    id: int
    worker: int
    kind: str
    model: str
    requests: list[Job] = field(default_factory=list)
    rows: int = 0
    sent_at: float = 0.0
    expected: float | None = None
    payload: Any = None
    #: Expected start on the worker's timeline, and the latest start that still meets the
    #: deadlines of the requests it carries (None: no limit).
    earliest: float = 0.0
    latest: float | None = None
    #: Set when it ends: the later of its sending and the end of the action before it on its
    #: worker, heard then (`WorkerSlot.finish`); from there to its end is its run and the
    #: round trip, not the wait behind the action before it.
    startable_at: float = 0.0
    evict: list[str] = field(default_factory=list)
    #: A streamed INFER (its model answers in parts): when its first and latest parts came,
    #: and, for each of its requests that takes its answer whole (by index), its parts so far.
    first_part_at: float | None = None
    last_part_at: float = 0.0
    gathered: dict[int, list[Any]] | None = None


@dataclass
class Decisions:
    """What one poll decided: actions to send, requests to reject, when to poll again."""

    dispatches: list[Dispatch] = field(default_factory=list)
    rejected: list[tuple[Job, HeadwayError]] = field(default_factory=list)
    wakeup: float | None = None


@dataclass
class Counters:
    """Events the scheduler caused, for metrics and experiments."""

    loads: int = 0
    probe_loads: int = 0  # of `loads`: made to measure (`scheduling.probes.LoadProbes`)
    evictions: int = 0
    cold_starts: int = 0
    refusals: int = 0
    dropped: int = 0
    rejected_at_admission: int = 0
    refused_unread: int = 0


class Tally:
    """The scheduler's events counted in all (`counters`) and per model and reason (`events`:
    (model key, event, reason) -> count, for metrics)."""

    def __init__(self) -> None:
        self.counters = Counters()
        self.events: Counter[tuple[str, str, str]] = Counter()

    def count(self, model: str, event: str, reason: str = "", n: int = 1) -> None:
        """Count `n` of `event` (a `Counters` field) in all and for `model`."""
        if n:
            setattr(self.counters, event, getattr(self.counters, event) + n)
            self.events[model, event, reason] += n


def earliest(current: float | None, when: float) -> float:
    """The earlier of a wakeup time and another (None: no wakeup yet; 0.0 is a real time)."""
    return when if current is None else min(current, when)
