"""Where the planner's greedy descents start: InferLine's (`initial`: the fastest hardware at
batch 1) and, with restarts, a `batched_start` on each hardware kind (`headway.planning.planner`,
step 3, says why).

`Starts` is the planner's half that proposes starting configurations, beside `Moves`, which
proposes the steps from them.
"""

from __future__ import annotations

from dataclasses import replace

from headway.planning.moves import Moves
from headway.planning.pipeline import Configuration, StageConfig


class Starts(Moves):
    """Starting configurations for a pipeline under a P99 of `slo` seconds."""

    slo: float
    #: the P99 a plan is held to: the SLO less the headroom
    goal: float
    #: the server's time per query outside the models, on every query's critical path
    frontend_seconds: float
    #: also start from a `batched_start` on every hardware kind
    restarts: bool

    def initial(self) -> Configuration:
        """Every stage on its fastest hardware (lowest batch-1 latency), batch 1, 1 replica."""
        chosen: dict[str, StageConfig] = {}
        for stage in self.pipeline.names:
            kinds = self.hardware_for(stage)
            if not kinds:
                self.profile(stage, "any")  # raises, naming the model to profile
            fastest = min(kinds, key=lambda k: (self.profile(stage, k).latency(1), k))
            chosen[stage] = StageConfig(fastest, 1, 1)
        return Configuration(chosen)

    def batched_start(self, kind: str) -> Configuration | None:
        """Every stage on `kind` (its fastest kind where `kind` has no profile of its model) at
        the largest profiled batch size whose service time along the critical path is at most
        half the goal (a query may wait for the batch ahead of it), each with the fewest
        replicas below its throughput; None if batch 1 is already over that."""
        fastest = self.initial()
        kinds = {
            s: kind if kind in self.hardware_for(s) else fastest[s].hardware
            for s in self.pipeline.names
        }
        sizes = sorted(
            {b for s in self.pipeline.names for b in self.profile(s, kinds[s]).batch_sizes}
        )
        chosen: Configuration | None = None
        for size in sizes:
            batch = {
                s: max(
                    b
                    for b in self.profile(s, kinds[s]).batch_sizes
                    if b <= size or b == min(self.profile(s, kinds[s]).batch_sizes)
                )
                for s in self.pipeline.names
            }
            service = {s: self.profile(s, kinds[s]).latency(batch[s]) for s in self.pipeline.names}
            if self.frontend_seconds + self.pipeline.critical_path(service) > self.goal / 2:
                break
            config = Configuration(
                {s: StageConfig(kinds[s], batch[s]) for s in self.pipeline.names}
            )
            chosen = Configuration(
                {
                    s: replace(config[s], replicas=self.least_replicas(config, s))
                    for s in config.stages
                }
            )
        return chosen

    def starts(self) -> list[tuple[str, Configuration, bool]]:
        """The greedy descents to run, as (label, start, with Reconfigure): InferLine's search
        (`initial`, its three actions); then, with `restarts`, the same start with Reconfigure
        too, and a `batched_start` on each hardware kind (most expensive first) with it."""
        fastest = self.initial()
        found = [("the fastest hardware at batch 1", fastest, False)]
        if not self.restarts:
            return found
        found.append(("the fastest hardware at batch 1, with Reconfigure", fastest, True))
        for kind in sorted(self.catalogue, key=lambda k: (-self.catalogue[k].cost_per_hour, k)):
            start = self.batched_start(kind)
            if start is not None and start not in [c for _, c, _ in found]:
                batch = max(c.max_batch for c in start.stages.values())
                found.append((f"{kind} at batch {batch}", start, True))
        return found
