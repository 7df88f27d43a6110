"""Simulation: the real scheduler driven by simulated workers in virtual time.

`SimulatedWorker` replays profiled durations instead of running models (Clockwork's
`worker_dummy`); `Simulation` is a discrete-event loop that feeds a trace through the same
`Scheduler` the server uses, so experiments reach scales this machine cannot compute.
"""

from headway.sim.simulation import ModelProfile, Outcome, Simulation, SimulationResult
from headway.sim.worker import SimulatedWorker

__all__ = ["ModelProfile", "Outcome", "SimulatedWorker", "Simulation", "SimulationResult"]
