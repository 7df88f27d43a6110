"""Simulation: the server's own controller and scheduler, driven by simulated workers in
virtual time, so experiments reach scales this machine cannot compute.

`ServerSimulation` replays a trace through the real `Controller` (validation, cache, warm-up
runs, probes, loads) over `headway.sim.workers.SimulatedEngine`'s workers, which replay
profiled durations instead of running models (Clockwork's `worker_dummy`);
`headway.sim.pipeline.run_pipeline` sends it a pipeline's queries stage by stage through the
served flow's own executor, `headway.flows.executor` (the planner's estimator runs on it);
`ServerSimulation.run_streams` sends a generative model streamed requests, stepped by the
scheduler's own iteration-level batching.
"""

from headway.sim.results import ModelProfile, Outcome, SimulationResult, StreamsResult
from headway.sim.server import ServerSimulation
from headway.sim.workers import SimulatedEngine

__all__ = [
    "ModelProfile",
    "Outcome",
    "ServerSimulation",
    "SimulatedEngine",
    "SimulationResult",
    "StreamsResult",
]
