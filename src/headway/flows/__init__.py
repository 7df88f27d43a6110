"""Flows: Cloudflow's dataflow API for prediction pipelines.

`types` (typed tables), `operators` (map, filter, union, anyof, join, lookup, groupby, agg and
model calls), `graph` (building and type-checking), `plan` (the compiler: fusion, competitive
execution, batching), `local` (running in-process), `flow` (`Flow`: the graph, compiled and run).
Deployed flows are served by `headway.flows.serving`. See `docs/flows.md`.
"""

from headway.flows.flow import Flow
from headway.flows.graph import Node, Options
from headway.flows.local import LocalServices
from headway.flows.operators import Model
from headway.flows.plan import FlowPlan, FlowStage
from headway.flows.types import FlowError, Row, Schema, Table

__all__ = [
    "Flow",
    "FlowError",
    "FlowPlan",
    "FlowStage",
    "LocalServices",
    "Model",
    "Node",
    "Options",
    "Row",
    "Schema",
    "Table",
]
