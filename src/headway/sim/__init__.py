"""Simulation: the server's own controller and scheduler, driven by simulated workers in
virtual time.

`ServerSimulation` runs the real `Controller` (validation, cache, warm-up runs, probes, loads)
over `headway.testing.FakeEngine`'s simulated workers, which replay profiled durations instead
of running models (Clockwork's `worker_dummy`); `Simulation` replays a trace through it, or
drives the `Scheduler` alone for the planner's pipelines, so experiments reach scales this
machine cannot compute.
"""

from headway.sim.results import ModelProfile, Outcome, SimulationResult
from headway.sim.simulation import Simulation
from headway.sim.worker import SimulatedWorker

__all__ = ["ModelProfile", "Outcome", "SimulatedWorker", "Simulation", "SimulationResult"]
