"""`headway bench`: a load generator for any Open Inference Protocol server.

- `arrivals`: open-loop send schedules (constant, Poisson, gamma), pure and seeded.
- `workload`: request bodies, from the model's metadata or from a file, JSON or binary.
- `client`: where to send, the pre-encoded HTTP requests, and one run from start to drain.
- `pool`: the hot loop, keep-alive HTTP/1.1 connections driven by uvloop callbacks.
- `tally`: the raw counts and samples of a run.
- `report`: throughput, goodput, counts and latency percentiles, as a table or JSON.
- `rate_search`: the highest open-loop rate answered within an SLO, over short trials
  (`headway bench --find-rate`).
- `trace`, `replay`: replaying a multi-model trace, open loop (`headway.traces` rows).
"""
