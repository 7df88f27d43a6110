"""Settings for the whole test suite."""

from __future__ import annotations

import os

# The tests' own process computes as the workers do (`runtime/engines/local.py`): one BLAS and
# OpenMP thread. A second thread waiting for a turn on a busy machine makes the small fits and
# products of the tests many times slower, and no test measures speed. Set before NumPy loads.
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

# The suite runs the request path as pure Python even where a speedups build lies beside it
# (`headway.speedups`): coverage measures the sources, and tests stand in for and patch their
# classes, which compiled classes refuse. `tests/test_speedups.py` runs the compiled build.
os.environ.setdefault("HEADWAY_SPEEDUPS", "0")
