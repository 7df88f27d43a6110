"""A flow: the graph its operators build (`flows.graph`), compiled and run in-process.

Building and type-checking live in `flows.graph`, below the compiler (`flows.plan`) that reads
the graph; a `Flow` is that graph with the two steps a user asks of it, so the modules import
one way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from headway.flows.graph import FlowGraph, Options
from headway.flows.local import LocalServices, run_plan
from headway.flows.operators import Services
from headway.flows.plan import FlowPlan, compile_flow
from headway.flows.types import Table


class Flow(FlowGraph):
    """A dataflow over tables of `inputs` (column -> type); the flow itself is its source.

    ```python
    flow = Flow("cascade", {"image": np.ndarray})
    fast = flow.map(Model("digits-fast", {"probabilities": np.ndarray}))
    ...
    flow.local([row]) # runs in-process
    ```

    Each call returns a `Node` (Cloudflow's marker); calling an operator on a node twice branches.
    A flow must end in exactly one sink (a node nothing reads)."""

    def compile(self, options: Options | None = None) -> FlowPlan:
        return compile_flow(self, options or self.options)

    def local(
        self,
        rows: Iterable[Any],
        services: Services | None = None,
        options: Options | None = None,
    ) -> Table:
        """Run the flow in this process over one table (one query) and return the sink's."""
        plan = self.compile(options)
        return run_plan(plan, self.table(rows), services or LocalServices())
