"""The native thread pools a worker's models compute with: BLAS and OpenMP (through
threadpoolctl) and torch's.

An engine starts its workers with one thread each (predictable latency); a model that asks for
more (`options: {threads: N}`, which `headway serve --plan` sets from the hardware kind it
planned) gets them for its own actions: the worker sets the pools before an action of a model
that wants a different count than they have. Set at runtime, not through the environment: the
pools of a library are sized when it loads, and one worker process hosts several models.
"""

from __future__ import annotations

import sys


def set_threads(count: int) -> None:
    """Size every native thread pool loaded in this process to `count` threads."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # no way to reach BLAS and OpenMP; frameworks take `threads` still
        pass
    else:
        threadpool_limits(limits=count)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(count)


def pool_threads() -> dict[str, int]:
    """The threads of each native pool loaded in this process, by library (what a model can
    report to show what it runs with)."""
    from threadpoolctl import threadpool_info

    return {str(pool["internal_api"]): int(pool["num_threads"]) for pool in threadpool_info()}
