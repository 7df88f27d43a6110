"""Scale factors measured by running sample queries through a flow, for compare.py's cascades.

    python bench/planner/shares.py

InferLine measures each model's scale factor (the share of queries that reach it) by running
sample queries through the pipeline. Here that is done for the one cascade whose models and
data exist on this machine: the cascade flow of `examples/flows/cascade.py` (digits-fast, a
linear model, answers every query; the rows whose top probability is under 0.85 also go to
digits-slow, a 200-tree forest), its models trained on scikit-learn's digits
(`examples/flows/models.py`), every held-out digit sent through the compiled flow in this
process (`headway.planning.from_flow.measure_scales`, what `headway plan --samples` runs).
Writes `bench/planner/shares.json`, which compare.py takes as the second-stage share of its
cascades (a fast model, then a slow one for the inputs it is unsure of). Video monitoring's
and social media's shares (frames with vehicles or people, posts not in English) need models
and data this machine does not have; they stay assumed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.flows.examples import flow, models  # noqa: E402

from headway.flows import LocalServices  # noqa: E402
from headway.planning.from_flow import measure_scales, model_stages  # noqa: E402

OUT = Path(__file__).with_name("shares.json")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="headway-shares-") as folder:
        repository = Path(folder) / "repository"
        models.build(repository)
        compiled = flow("cascade").compile()
        rows = list(models.queries())
        scales = measure_scales(compiled, rows, LocalServices(repository=repository))
    by_model = {s.models[0]: scales[s.id] for s in model_stages(compiled)}
    found = {
        "cascade": {
            "flow": "examples/flows/cascade.py",
            "samples": len(rows),
            "shares": {model: round(share, 4) for model, share in by_model.items()},
        }
    }
    OUT.write_text(json.dumps(found, indent=2) + "\n")
    print(json.dumps(found))


if __name__ == "__main__":
    main()
