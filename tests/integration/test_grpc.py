"""`tritonclient.grpc`, unchanged, against Headway's gRPC port: the answers REST gives."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_aio
import tritonclient.http as triton_http
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from headway.datatypes import numpy_dtype
from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.models import BUILDERS

pytestmark = pytest.mark.integration


@pytest.fixture
def client(server: ServerProcess) -> triton_grpc.InferenceServerClient:
    return triton_grpc.InferenceServerClient(server.grpc_address)


@pytest.fixture
def rest(server: ServerProcess) -> triton_http.InferenceServerClient:
    return triton_http.InferenceServerClient(server.url.removeprefix("http://"))


def _inputs(rest: triton_http.InferenceServerClient, model: str, rows: np.ndarray) -> Any:
    """The model's one input, as its metadata declares it, and `rows` in its datatype."""
    spec = rest.get_model_metadata(model)["inputs"][0]
    return spec["name"], spec["datatype"], rows.astype(numpy_dtype(spec["datatype"]))


def _rest_answer(
    rest: triton_http.InferenceServerClient, model: str, rows: np.ndarray
) -> dict[str, np.ndarray]:
    name, datatype, sent = _inputs(rest, model, rows)
    tensor = triton_http.InferInput(name, list(sent.shape), datatype)
    tensor.set_data_from_numpy(sent)
    result = rest.infer(model, [tensor])
    return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}


def test_health_metadata_config_and_extensions_match_rest(
    client: triton_grpc.InferenceServerClient, rest: triton_http.InferenceServerClient
) -> None:
    assert client.is_server_live()
    # strict readiness, as REST's: the repository's "broken" model does not serve
    assert client.is_server_ready() is rest.is_server_ready() is False
    assert client.is_model_ready("digits-logreg")
    assert not client.is_model_ready("broken")  # failed to load
    assert not client.is_model_ready("no-such-model")
    server = client.get_server_metadata(as_json=True)
    assert server["name"] == "headway"
    assert server["extensions"] == rest.get_server_metadata()["extensions"]
    assert "statistics" in server["extensions"]
    metadata = client.get_model_metadata("digits-logreg", as_json=True)
    over_rest = rest.get_model_metadata("digits-logreg")
    assert metadata["inputs"] == [
        {**t, "shape": [str(d) for d in t["shape"]]} for t in over_rest["inputs"]
    ]  # protobuf's JSON writes int64 as strings
    assert metadata["platform"] == over_rest["platform"]
    config = client.get_model_config("digits-logreg").config
    assert config.max_batch_size == rest.get_model_config("digits-logreg")["max_batch_size"]
    assert [i.name for i in config.input] == ["input-0"]
    assert list(config.input[0].dims) == [64]
    assert config.parameters["headway.slo_ms"].string_value


@pytest.mark.parametrize("model", list(BUILDERS))
def test_raw_tensors_answer_as_rest_for_every_framework(
    client: triton_grpc.InferenceServerClient,
    rest: triton_http.InferenceServerClient,
    repository: tuple[Path, dict[str, Any]],
    model: str,
) -> None:
    rows, expected = repository[1][model]
    name, datatype, sent = _inputs(rest, model, rows)
    tensor = triton_grpc.InferInput(name, list(sent.shape), datatype)
    tensor.set_data_from_numpy(sent)
    result = client.infer(model, [tensor], request_id="g-1")
    over_rest = _rest_answer(rest, model, rows)
    assert result.get_response().id == "g-1"
    assert {o.name for o in result.get_response().outputs} == set(over_rest)
    for output, want in over_rest.items():
        np.testing.assert_array_equal(result.as_numpy(output), want, err_msg=output)
        np.testing.assert_allclose(want, expected[output], rtol=1e-5, atol=1e-6)


def test_the_async_client_and_requested_outputs(
    server: ServerProcess,
    rest: triton_http.InferenceServerClient,
    repository: tuple[Path, dict[str, Any]],
) -> None:
    rows, _ = repository[1]["digits-logreg"]
    over_rest = _rest_answer(rest, "digits-logreg", rows)

    async def ask() -> list[np.ndarray]:
        async with triton_aio.InferenceServerClient(server.grpc_address) as client:
            assert await client.is_model_ready("digits-logreg")
            tensor = triton_aio.InferInput("input-0", list(rows.shape), "FP64")
            tensor.set_data_from_numpy(rows)
            wanted = [triton_aio.InferRequestedOutput("label")]
            results = await asyncio.gather(
                *(client.infer("digits-logreg", [tensor], outputs=wanted) for _ in range(8))
            )
            for result in results:
                assert [o.name for o in result.get_response().outputs] == ["label"]
            return [result.as_numpy("label") for result in results]

    for labels in asyncio.run(ask()):
        np.testing.assert_array_equal(labels, over_rest["label"])


def test_typed_contents_the_json_equivalent_answer_as_rest(
    server: ServerProcess,
    rest: triton_http.InferenceServerClient,
    repository: tuple[Path, dict[str, Any]],
) -> None:
    rows, _ = repository[1]["iris-forest"]
    request = service_pb2.ModelInferRequest(model_name="iris-forest", id="typed")
    tensor = request.inputs.add(name="input-0", datatype="FP64", shape=list(rows.shape))
    tensor.contents.fp64_contents.extend(rows.reshape(-1).tolist())
    with grpc.insecure_channel(server.grpc_address) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    over_rest = _rest_answer(rest, "iris-forest", rows)
    assert response.id == "typed"
    assert len(response.raw_output_contents) == len(response.outputs) == len(over_rest)
    for output, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        got = np.frombuffer(raw, numpy_dtype(output.datatype)).reshape(list(output.shape))
        np.testing.assert_array_equal(got, over_rest[output.name])


def test_deadlines_from_grpc_and_from_parameters(
    client: triton_grpc.InferenceServerClient,
) -> None:
    tensor = triton_grpc.InferInput("input-0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    client.infer("slow", [tensor])  # the 0.2 s model has run: its duration is known
    for limits in ({"client_timeout": 0.05}, {"timeout": 5_000}):
        with pytest.raises(InferenceServerException) as caught:
            client.infer("slow", [tensor], **limits)  # type: ignore[arg-type]
        assert caught.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    answer = client.infer("doubler", [tensor], client_timeout=10.0, priority=1)
    np.testing.assert_array_equal(answer.as_numpy("output-0"), np.full((1, 4), 2.0))


def test_a_refusal_names_its_reason_beside_the_status_tritonclient_reads(
    server: ServerProcess, client: triton_grpc.InferenceServerClient
) -> None:
    """`headway-reason` in a unary call's trailing metadata, `reason` in the parameters of a
    stream's error response (tritonclient reads only its `error_message`)."""
    tensor = triton_grpc.InferInput("input-0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    client.infer("slow", [tensor])  # the 0.2 s model has run: its duration is known
    with pytest.raises(InferenceServerException, match="deadline cannot be met") as caught:
        client.infer("slow", [tensor], timeout=5_000)
    assert caught.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    request = service_pb2.ModelInferRequest(model_name="slow")
    request.inputs.add(name="input-0", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.ones((1, 4), np.float32).tobytes())
    request.parameters["timeout"].int64_param = 5_000
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request)
        assert refused.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert ("headway-reason", "deadline") in refused.value.trailing_metadata()
        [response] = stub.ModelStreamInfer(iter([request]))
        assert "deadline cannot be met" in response.error_message
        assert response.infer_response.parameters["reason"].string_param == "deadline"
        del request.parameters["timeout"]
        request.model_name = "doubler"
        _, answered = stub.ModelInfer.with_call(request)
        assert all(key != "headway-reason" for key, _ in answered.trailing_metadata())


def test_errors_travel_as_status_codes_with_messages(
    client: triton_grpc.InferenceServerClient,
) -> None:
    tensor = triton_grpc.InferInput("input-0", [1, 3], "FP64")
    tensor.set_data_from_numpy(np.zeros((1, 3)))
    with pytest.raises(InferenceServerException, match=r"expected shape \[-1, 64\], got \[1, 3\]"):
        client.infer("digits-logreg", [tensor])
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_metadata("nope")
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    assert "nope" in str(caught.value.message())
    assert client.is_server_live()


def test_repository_index_unload_and_load(client: triton_grpc.InferenceServerClient) -> None:
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index["doubler"].state == "READY"
    assert index["broken"].state == "UNAVAILABLE"
    client.unload_model("doubler")
    assert not client.is_model_ready("doubler")
    client.load_model("doubler")
    assert client.is_model_ready("doubler")
    with pytest.raises(InferenceServerException, match="weights file is corrupt"):
        client.load_model("broken")


def test_statistics_agree_over_both_protocols(
    client: triton_grpc.InferenceServerClient,
    rest: triton_http.InferenceServerClient,
    repository: tuple[Path, dict[str, Any]],
) -> None:
    rows, _ = repository[1]["wine-lightgbm"]
    tensor = triton_grpc.InferInput("input-0", list(rows.shape), "FP64")
    tensor.set_data_from_numpy(rows)
    before = rest.get_inference_statistics("wine-lightgbm")["model_stats"][0]
    for _ in range(3):
        client.infer("wine-lightgbm", [tensor])
    over_grpc = client.get_inference_statistics("wine-lightgbm").model_stats[0]
    over_rest = rest.get_inference_statistics("wine-lightgbm")["model_stats"][0]
    assert over_grpc.name == over_rest["name"] == "wine-lightgbm"
    assert over_grpc.version == over_rest["version"] == "1"
    stats = over_rest["inference_stats"]
    assert stats["success"]["count"] == before["inference_stats"]["success"]["count"] + 3
    assert over_rest["inference_count"] >= before["inference_count"] + 3 * len(rows)
    assert over_rest["last_inference"] > before["last_inference"]
    for kind in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert getattr(over_grpc.inference_stats, kind).count == stats[kind]["count"]
        assert getattr(over_grpc.inference_stats, kind).ns == stats[kind]["ns"]
        assert stats[kind]["count"] >= 3, kind
    assert stats["compute_infer"]["ns"] > 0
    assert {b.batch_size for b in over_grpc.batch_stats} == {
        b["batch_size"] for b in over_rest["batch_stats"]
    }
    assert (
        sum(b["compute_infer"]["count"] for b in over_rest["batch_stats"])
        == (over_rest["execution_count"])
    )
    everything = client.get_inference_statistics().model_stats
    assert "wine-lightgbm" in {s.name for s in everything}


def test_load_and_unload_need_the_admin_token_when_the_server_has_one(tmp_path: Path) -> None:
    models.python_model(tmp_path / "repository", "doubler", "Doubler")
    token = "grpc-admin-token"
    with ServerProcess(
        tmp_path / "repository", state=tmp_path / "s.db", env={"HEADWAY_ADMIN_TOKEN": token}
    ) as server:
        client = triton_grpc.InferenceServerClient(server.grpc_address)
        for headers in (None, {"authorization": "Bearer wrong"}):
            with pytest.raises(InferenceServerException) as caught:
                client.unload_model("doubler", headers=headers)
            assert caught.value.status() == "StatusCode.UNAUTHENTICATED"
            assert "admin token" in str(caught.value.message())
        assert client.is_model_ready("doubler")  # reading stays open
        admin = {"authorization": f"Bearer {token}"}
        client.unload_model("doubler", headers=admin)
        assert not client.is_model_ready("doubler")
        client.load_model("doubler", headers=admin)
        assert client.is_model_ready("doubler")
