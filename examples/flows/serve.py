"""Serve the example flows with one command:

    python examples/flows/serve.py [FOLDER]

trains the models into FOLDER/repository (default ./flows-example), puts the recommender's
lookup values into FOLDER/state.db, and runs `headway serve` with `headway.yaml`. Then:

    curl -s localhost:8000/apps/cascade/predict -d '{"input": [0, 0, 5, 13, ...]}'
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import models  # noqa: E402

from headway.flows.lookups import Lookups  # noqa: E402
from headway.store import Store  # noqa: E402


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "flows-example").resolve()
    repository = folder / "repository"
    if not repository.exists():
        models.build(repository)
    store = Store(folder / "state.db")
    lookups = Lookups(store)
    for key, value in models.lookups().items():
        lookups.put(key, value)
    store.close()
    command = ["headway", "serve", "--repository", str(repository), "--state",
               str(folder / "state.db"), "--config", str(HERE / "headway.yaml"), *sys.argv[2:]]  # fmt: skip
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
