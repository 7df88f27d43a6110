"""What the worker's in-process tests share: a python model folder and one action through the
wire format both ways."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from headway.repository import read_model
from headway.runtime.wire import pack, unpack
from headway.runtime.worker import WorkerState

MODEL_PY = textwrap.dedent(
    """
    import numpy as np

    class Scaler:
        inputs = [{"name": "input-0", "datatype": "FP32", "shape": [-1, 2]}]
        outputs = [{"name": "output-0", "datatype": "FP32", "shape": [-1, 2]}]

        def load(self, path):
            self.scale = float((path / "scale.txt").read_text())

        def predict(self, batch):
            if np.any(batch < 0):
                raise ValueError("negative input")
            return batch * np.float32(self.scale)

    class FirstRowOnly:
        def predict(self, batch):
            return batch[:1]

    class Broken:
        def load(self, path):
            raise RuntimeError("no weights here")

        def predict(self, batch):
            return batch
    """
)


def model_config(tmp_path: Path, name: str, entrypoint: str = "model.py:Scaler") -> dict[str, Any]:
    """A python model folder in tmp_path; returns its wire config."""
    folder = tmp_path / name
    (folder / "1").mkdir(parents=True)
    (folder / "model.py").write_text(MODEL_PY)
    (folder / "1" / "scale.txt").write_text("2.0")
    (folder / "model.yaml").write_text(f"framework: python\nentrypoint: {entrypoint}\n")
    return read_model(folder).to_wire()


def call(
    state: WorkerState, header: dict[str, Any], tensors: dict[str, np.ndarray] | None = None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One action through the wire format both ways, as the worker's socket loop does it."""
    frames = pack(dict(header), tensors or {})
    received = [f.tobytes() if isinstance(f, np.ndarray) else bytes(f) for f in frames]
    reply, outputs = state.handle(*unpack(received))
    frames = pack(reply, outputs)
    reply, outputs = unpack(
        [f.tobytes() if isinstance(f, np.ndarray) else bytes(f) for f in frames]
    )
    reply.pop("tensors", None)  # the wire format's own table of the tensor frames
    return reply, outputs


THREADS_PY = textwrap.dedent(
    """
    import numpy as np

    from headway.runtime.threads import pool_threads

    class Threads:
        inputs = [{"name": "input-0", "datatype": "FP32", "shape": [-1, 1]}]
        outputs = [{"name": "output-0", "datatype": "INT64", "shape": [-1, 1]}]

        def predict(self, batch):
            return np.full((len(batch), 1), min(pool_threads().values()), dtype=np.int64)
    """
)


def threads_model(root: Path, name: str, threads: int | None) -> Path:
    """A python model that answers the threads of the native pools it computes with."""
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "model.py").write_text(THREADS_PY)
    options = "" if threads is None else f"options: {{threads: {threads}}}\n"
    (folder / "model.yaml").write_text(
        f"framework: python\nentrypoint: model.py:Threads\n{options}"
    )
    return folder
