"""Planning pipelines to a tail-latency SLO at least cost (InferLine).

`pipeline` describes what is planned (stages, shares, hardware, profiles, configurations);
`simulator` estimates a configuration's latencies by running the server's own controller over
simulated workers (`headway.sim`); `planner` searches for the cheapest configuration whose P99
meets the SLO.
Around them: `profiler` (measuring models on worker processes), `steps` (a generative
model's steps, measured into the stage file `generative` sizes), `description` (what the files
say), `from_flow` (a compiled flow as a pipeline), `workloads` (arrival traces), `plan_file`,
`envelope` and `tuner` (InferLine's tuner), `scaling` (replica changes during a replay),
`baselines` (InferLine's coarse-grained CG-Mean and CG-Peak, to compare a plan with),
`exhaustive` (a lower bound on any configuration's cost and the cheapest one by exhaustive
search, to judge a plan by) and `live` (the tuner in the server). See docs/planning.md.
"""

from headway.planning.pipeline import (
    Catalogue,
    Configuration,
    Hardware,
    LatencyProfile,
    Pipeline,
    Profiles,
    Stage,
    StageConfig,
)
from headway.planning.planner import Plan, Planner
from headway.planning.simulator import Estimate, simulate

__all__ = [
    "Catalogue",
    "Configuration",
    "Estimate",
    "Hardware",
    "LatencyProfile",
    "Pipeline",
    "Plan",
    "Planner",
    "Profiles",
    "Stage",
    "StageConfig",
    "simulate",
]
