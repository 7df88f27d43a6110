"""The official `tritonclient` works unchanged against Headway, with JSON and binary tensors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from headway.launcher import ServerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def client(server: ServerProcess) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(server.url.removeprefix("http://"))


def test_health_and_metadata(client: triton.InferenceServerClient) -> None:
    assert client.is_server_live()
    # strict readiness: the shared repository's `broken` model fails to load
    assert not client.is_server_ready()
    assert client.is_model_ready("digits-logreg")
    assert not client.is_model_ready("broken")
    metadata = client.get_model_metadata("digits-logreg")
    assert metadata["inputs"][0]["shape"] == [-1, 64]
    assert client.get_model_config("digits-logreg")["max_batch_size"] == 32
    assert client.get_server_metadata()["name"] == "headway"


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_with_binary_and_json_tensors(
    client: triton.InferenceServerClient, repository: tuple[Path, dict[str, Any]], binary: bool
) -> None:
    rows, expected = repository[1]["digits-logreg"]
    tensor = triton.InferInput("input-0", list(rows.shape), "FP64")
    tensor.set_data_from_numpy(rows, binary_data=binary)
    outputs = [
        triton.InferRequestedOutput("label", binary_data=binary),
        triton.InferRequestedOutput("probabilities", binary_data=binary),
    ]
    result = client.infer("digits-logreg", [tensor], outputs=outputs, request_id="q-1")
    np.testing.assert_array_equal(result.as_numpy("label"), expected["label"])
    np.testing.assert_allclose(
        result.as_numpy("probabilities"), expected["probabilities"], rtol=1e-6
    )
    assert result.get_response()["id"] == "q-1"


def test_default_client_path_returns_all_outputs(
    client: triton.InferenceServerClient, repository: tuple[Path, dict[str, Any]]
) -> None:
    rows, expected = repository[1]["cancer-torch"]
    tensor = triton.InferInput("input-0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    result = client.infer("cancer-torch", [tensor])
    np.testing.assert_allclose(result.as_numpy("output-0"), expected["output-0"], rtol=1e-5)


def test_timeout_and_priority_parameters(client: triton.InferenceServerClient) -> None:
    rows = np.ones((1, 4), np.float32)
    tensor = triton.InferInput("input-0", [1, 4], "FP32")
    tensor.set_data_from_numpy(rows)
    result = client.infer("doubler", [tensor], priority=1, timeout=2_000_000)
    np.testing.assert_array_equal(result.as_numpy("output-0"), rows * 2)
    with pytest.raises(InferenceServerException, match="deadline cannot be met"):
        client.infer("slow", [tensor], timeout=5_000)


def test_errors_reach_the_client_as_messages(client: triton.InferenceServerClient) -> None:
    tensor = triton.InferInput("input-0", [1, 3], "FP64")
    tensor.set_data_from_numpy(np.zeros((1, 3)))
    with pytest.raises(InferenceServerException, match=r"expected shape \[-1, 64\], got \[1, 3\]"):
        client.infer("digits-logreg", [tensor])
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("nope")
