"""Gentler inputs: a datatype that converts without loss is converted (FP32 to a model declared
FP64, INT32 to INT64); a PyTorch model that declares no inputs reports what its probe saw and
refuses a wrong datatype with a 400 naming it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from headway.launcher import ServerProcess
from tests.integration import models

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    import torch

    tmp = tmp_path_factory.mktemp("gentle")
    root = tmp / "repository"
    models.digits_logreg(root)
    folder = root / "counts" / "1"
    folder.mkdir(parents=True)
    (root / "counts" / "model.yaml").write_text(
        "framework: python\nentrypoint: models.py:Doubler\n"
        "inputs: [{name: input-0, datatype: INT64, shape: [-1, 2]}]\n"
    )
    (folder / "models.py").write_text(models.PYTHON_MODELS)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(30, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    (root / "undeclared" / "1").mkdir(parents=True)
    (root / "undeclared" / "model.yaml").write_text("framework: torch\n")
    torch.save(net.eval(), root / "undeclared" / "1" / "model.pt")
    with ServerProcess(root, state=tmp / "s.db", log=tmp / "server.log") as server:
        yield server, root


def _infer(server: ServerProcess, model: str, rows: np.ndarray) -> triton_http.InferResult:
    client = triton_http.InferenceServerClient(server.url.removeprefix("http://"))
    datatype = {"f": "FP", "i": "INT"}[rows.dtype.kind] + str(rows.dtype.itemsize * 8)
    tensor = triton_http.InferInput("input-0", list(rows.shape), datatype)
    tensor.set_data_from_numpy(rows)
    return client.infer(model, [tensor])


def test_fp32_to_a_model_declared_fp64_answers_as_fp64_would(
    served: tuple[ServerProcess, Path],
) -> None:
    server, _ = served
    from sklearn.datasets import load_digits

    rows = load_digits().data[:10]  # small integers: the same values in FP32 and FP64
    as_fp64 = _infer(server, "digits-logreg", rows)
    as_fp32 = _infer(server, "digits-logreg", rows.astype(np.float32))
    for output in ("label", "probabilities"):
        np.testing.assert_array_equal(as_fp32.as_numpy(output), as_fp64.as_numpy(output))


def test_int32_to_a_model_declared_int64_is_converted(served: tuple[ServerProcess, Path]) -> None:
    server, _ = served
    rows = np.array([[1, -2], [2**31 - 1, 0]], dtype=np.int32)
    answer = _infer(server, "counts", rows).as_numpy("output-0")
    np.testing.assert_array_equal(answer, rows.astype(np.int64) * 2.0)
    with pytest.raises(InferenceServerException, match="FP64 does not convert to INT64"):
        _infer(server, "counts", rows.astype(np.float64))


def test_an_undeclared_torch_model_reports_its_probe_and_refuses_a_wrong_datatype(
    served: tuple[ServerProcess, Path],
) -> None:
    server, _ = served
    metadata = httpx.get(f"{server.url}/v2/models/undeclared").json()
    assert metadata["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 30]}]
    assert metadata["outputs"] == [{"name": "output-0", "datatype": "FP32", "shape": [-1, 2]}]
    rows = np.random.default_rng(0).normal(size=(3, 30))
    assert _infer(server, "undeclared", rows.astype(np.float32)).as_numpy("output-0").shape == (
        3,
        2,
    )
    with pytest.raises(InferenceServerException) as caught:
        _infer(server, "undeclared", rows)
    assert caught.value.status() == "400"
    assert "input 'input-0': expected datatype FP32, got FP64" in str(caught.value)
    grpc_client = triton_grpc.InferenceServerClient(server.grpc_address)
    tensor = triton_grpc.InferInput("input-0", [3, 30], "FP64")
    tensor.set_data_from_numpy(rows)
    with pytest.raises(InferenceServerException, match="expected datatype FP32, got FP64") as over:
        grpc_client.infer("undeclared", [tensor])
    assert over.value.status() == "StatusCode.INVALID_ARGUMENT"
