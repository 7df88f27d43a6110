"""Every adapter against its framework: tiny real models, the same rows, the same answers."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from headway.adapters import adapter_class
from headway.adapters.base import Adapter
from headway.datatypes import numpy_dtype
from headway.demo import build_demo_repository
from headway.errors import ConfigError, InvalidInput
from headway.repository import Repository, read_model

joblib = pytest.importorskip("joblib")
datasets = pytest.importorskip("sklearn.datasets")


def model_folder(root: Path, name: str, config: dict[str, Any]) -> Path:
    """Write `root/name/model.yaml` and return the (empty) version folder `root/name/1`."""
    version = root / name / "1"
    version.mkdir(parents=True)
    (root / name / "model.yaml").write_text(yaml.safe_dump(config))
    return version


def loaded(model_dir: Path) -> Adapter:
    config = read_model(model_dir)
    adapter = adapter_class(config.framework)(config.to_wire())
    adapter.load()
    return adapter


def iris() -> tuple[np.ndarray, np.ndarray]:
    x, y = datasets.load_iris(return_X_y=True)
    return x, y


def spec(name: str, datatype: str, shape: list[int]) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape}


def test_unknown_framework_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'nope'"):
        adapter_class("nope")


# -- scikit-learn ---------------------------------------------------------------------------------


def test_sklearn_classifier_answers_label_and_probabilities(tmp_path: Path) -> None:
    from sklearn.linear_model import LogisticRegression

    x, y = iris()
    model = LogisticRegression(max_iter=500).fit(x, y)
    joblib.dump(model, model_folder(tmp_path, "iris", {"framework": "sklearn"}) / "m.joblib")
    adapter = loaded(tmp_path / "iris")

    out = adapter.predict({"input-0": x[:20]})
    assert sorted(out) == ["label", "probabilities"]
    np.testing.assert_array_equal(out["label"], model.predict(x[:20]))
    assert out["label"].dtype == np.int64
    np.testing.assert_allclose(out["probabilities"], model.predict_proba(x[:20]))
    assert adapter.signature() == (
        [spec("input-0", "FP64", [-1, 4])],
        [spec("label", "INT64", [-1]), spec("probabilities", "FP64", [-1, 3])],
    )
    assert sorted(adapter.predict({"rows": x[:3]}, ["probabilities"])) == ["probabilities"]
    assert sorted(adapter.predict({"rows": x[:3]}, ["label"])) == ["label"]


def test_sklearn_string_classes_and_regressors(tmp_path: Path) -> None:
    from sklearn.linear_model import Ridge
    from sklearn.tree import DecisionTreeClassifier

    x, y = iris()
    names = np.array(["setosa", "versicolor", "virginica"], dtype=object)[y]
    tree = DecisionTreeClassifier(max_depth=3, random_state=0).fit(x, names)
    config = {"framework": "sklearn", "inputs": [spec("flower", "FP64", [-1, 4])]}
    joblib.dump(tree, model_folder(tmp_path, "names", config) / "tree.pkl")
    adapter = loaded(tmp_path / "names")
    np.testing.assert_array_equal(adapter.predict({"flower": x})["label"], tree.predict(x))
    inputs, outputs = adapter.signature()
    assert inputs == [spec("flower", "FP64", [-1, 4])]
    assert outputs[0] == spec("label", "BYTES", [-1])

    ridge = Ridge().fit(x[:, :3], x[:, 3])
    joblib.dump(ridge, model_folder(tmp_path, "width", {"framework": "sklearn"}) / "r.pickle")
    adapter = loaded(tmp_path / "width")
    out = adapter.predict({"input-0": x[:, :3]})
    np.testing.assert_array_equal(out["output-0"], ridge.predict(x[:, :3]))
    assert adapter.signature() == (
        [spec("input-0", "FP64", [-1, 3])],
        [spec("output-0", "FP64", [-1])],
    )
    assert adapter.predict({"input-0": x[:, :3]}, ["probabilities"]) == {}


def test_sklearn_missing_or_broken_artifact_is_a_config_error(tmp_path: Path) -> None:
    model_folder(tmp_path, "empty", {"framework": "sklearn"})
    with pytest.raises(ConfigError, match=r"'empty'.*no artifact matching.*\.joblib"):
        loaded(tmp_path / "empty")

    (model_folder(tmp_path, "broken", {"framework": "sklearn"}) / "model.joblib").write_text("x")
    with pytest.raises(ConfigError, match=r"'broken'.*cannot load .*model\.joblib"):
        loaded(tmp_path / "broken")

    joblib.dump(
        {"not": "a model"}, model_folder(tmp_path, "dict", {"framework": "sklearn"}) / "m.pkl"
    )
    with pytest.raises(ConfigError, match=r"'dict'.*holds a dict, which has no predict"):
        loaded(tmp_path / "dict")


# -- plain Python ---------------------------------------------------------------------------------

CLASS_MODEL = """
import numpy as np
from helper import SCALE  # a file beside this one


class Scaler:
    inputs = [{"name": "x", "datatype": "FP64", "shape": [-1, 2]}]

    def load(self, path):
        self.offset = float((path / "offset.txt").read_text())

    def predict(self, batch):
        return batch * SCALE + self.offset


def pair(batch):
    return {"sum": batch["a"] + batch["b"], "difference": batch["a"] - batch["b"]}
"""


def test_python_class_and_function_entrypoints(tmp_path: Path) -> None:
    version = model_folder(
        tmp_path, "scaler", {"framework": "python", "entrypoint": "model.py:Scaler"}
    )
    (tmp_path / "scaler" / "model.py").write_text(CLASS_MODEL)  # found in the model folder
    (tmp_path / "scaler" / "helper.py").write_text("SCALE = 3.0\n")
    (version / "offset.txt").write_text("0.5")
    adapter = loaded(tmp_path / "scaler")
    batch = np.arange(6.0).reshape(3, 2)
    out = adapter.predict({"x": batch})
    np.testing.assert_array_equal(out["output-0"], batch * 3.0 + 0.5)
    assert adapter.signature() == ([spec("x", "FP64", [-1, 2])], [])

    version = model_folder(tmp_path, "pair", {"framework": "python", "entrypoint": "m.py:pair"})
    (version / "m.py").write_text(CLASS_MODEL)  # found in the version folder
    (version / "helper.py").write_text("SCALE = 1.0\n")
    adapter = loaded(tmp_path / "pair")
    a, b = np.array([1, 2]), np.array([10, 20])
    out = adapter.predict({"a": a, "b": b})
    np.testing.assert_array_equal(out["sum"], a + b)
    np.testing.assert_array_equal(out["difference"], a - b)
    assert sorted(adapter.predict({"a": a, "b": b}, ["sum"])) == ["sum"]
    assert adapter.signature() == ([], [])


def test_python_entrypoint_errors_name_the_model(tmp_path: Path) -> None:
    config = {"framework": "python", "entrypoint": "absent.py:Model"}
    model_folder(tmp_path, "absent", config)
    with pytest.raises(ConfigError, match=r"'absent'.*absent\.py is in neither"):
        loaded(tmp_path / "absent")

    config = {"framework": "python", "entrypoint": "m.py:Missing"}
    (model_folder(tmp_path, "noattr", config) / "m.py").write_text("x = 1\n")
    with pytest.raises(ConfigError, match=r"'noattr'.*defines no 'Missing'"):
        loaded(tmp_path / "noattr")

    config = {"framework": "python", "entrypoint": "m.py:Broken"}
    (model_folder(tmp_path, "broken", config) / "m.py").write_text(
        "class Broken:\n    def load(self, path):\n        raise OSError('weights gone')\n"
    )
    with pytest.raises(ConfigError, match=r"'broken'.*loading failed.*weights gone"):
        loaded(tmp_path / "broken")


# -- PyTorch --------------------------------------------------------------------------------------


def test_torch_torchscript_and_eager_modules(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    x = iris()[0][:16].astype(np.float32)
    with torch.no_grad():
        expected = net(torch.from_numpy(x)).numpy()

    config = {"framework": "torch", "inputs": [spec("input-0", "FP32", [-1, 4])]}
    version = model_folder(tmp_path, "scripted", config)
    torch.jit.trace(net, torch.zeros(1, 4)).save(str(version / "model.pt"))
    adapter = loaded(tmp_path / "scripted")
    x.flags.writeable = False  # as a zero-copy request buffer arrives
    out = adapter.predict({"input-0": x})
    np.testing.assert_allclose(out["output-0"], expected, rtol=1e-6)
    assert adapter.signature() == ([], [])

    torch.save(net, model_folder(tmp_path, "eager", {"framework": "torch"}) / "net.pth")
    np.testing.assert_allclose(
        loaded(tmp_path / "eager").predict({"input-0": x})["output-0"], expected, rtol=1e-6
    )

    torch.save(net.state_dict(), model_folder(tmp_path, "weights", {"framework": "torch"}) / "w.pt")
    with pytest.raises(ConfigError, match=r"'weights'.*w\.pt holds a .*Dict, not a module"):
        loaded(tmp_path / "weights")
    model_folder(tmp_path, "none", {"framework": "torch"})
    with pytest.raises(ConfigError, match=r"'none'.*no artifact"):
        loaded(tmp_path / "none")


def test_torch_without_declared_inputs_reports_the_signature_its_probe_saw(
    tmp_path: Path,
) -> None:
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    torch.save(net, model_folder(tmp_path, "eager", {"framework": "torch"}) / "net.pth")
    torch.jit.script(net.double()).save(
        str(model_folder(tmp_path, "scripted64", {"framework": "torch"}) / "model.pt")
    )
    assert loaded(tmp_path / "eager").signature() == (
        [spec("input-0", "FP32", [-1, 4])],
        [spec("output-0", "FP32", [-1, 3])],
    )
    inputs, _ = loaded(tmp_path / "scripted64").signature()
    assert inputs == [spec("input-0", "FP64", [-1, 4])]
    # an embedding's first weight is a matrix too, but it takes indices: the probe fails
    words = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Flatten()).eval()
    torch.save(words, model_folder(tmp_path, "words", {"framework": "torch"}) / "net.pth")
    assert loaded(tmp_path / "words").signature() == ([], [])


def test_torch_several_inputs_and_outputs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Two(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a - b, a * b

    config = {"framework": "torch", "inputs": [spec("b", "FP32", [-1]), spec("a", "FP32", [-1])]}
    torch.jit.script(Two()).save(str(model_folder(tmp_path, "two", config) / "model.pt"))
    adapter = loaded(tmp_path / "two")
    a, b = np.array([5.0, 7.0], np.float32), np.array([1.0, 2.0], np.float32)
    out = adapter.predict({"a": a, "b": b})  # declared order: model(b, a)
    np.testing.assert_array_equal(out["output-0"], b - a)
    np.testing.assert_array_equal(out["output-1"], a * b)
    assert list(adapter.predict({"a": a, "b": b}, ["output-1"])) == ["output-1"]


# -- ONNX Runtime ---------------------------------------------------------------------------------


def test_onnx_classifier_from_skl2onnx(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import LogisticRegression

    x, y = iris()
    model = LogisticRegression(max_iter=500).fit(x, y)
    graph = skl2onnx.convert_sklearn(
        model,
        initial_types=[("features", FloatTensorType([None, 4]))],
        options={id(model): {"zipmap": False}},
    )
    path = model_folder(tmp_path, "iris-onnx", {"framework": "onnx"}) / "model.onnx"
    path.write_bytes(graph.SerializeToString())
    adapter = loaded(tmp_path / "iris-onnx")
    assert adapter.signature() == (
        [spec("features", "FP32", [-1, 4])],
        [spec("label", "INT64", [-1]), spec("probabilities", "FP32", [-1, 3])],
    )

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    label, probabilities = session.run(None, {"features": x.astype(np.float32)})
    out = adapter.predict({"input-0": x})  # default name and FP64: fed and cast anyway
    np.testing.assert_array_equal(out["label"], label)
    np.testing.assert_array_equal(out["probabilities"], probabilities)
    np.testing.assert_array_equal(out["label"], model.predict(x))
    only = adapter.predict({"features": x.astype(np.float32)}, ["probabilities"])
    assert list(only) == ["probabilities"]

    (model_folder(tmp_path, "junk", {"framework": "onnx"}) / "model.onnx").write_bytes(b"junk")
    with pytest.raises(ConfigError, match=r"'junk'.*cannot load .*model\.onnx"):
        loaded(tmp_path / "junk")


def test_onnx_several_inputs_are_fed_by_name(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    a, b = (helper.make_tensor_value_info(n, TensorProto.DOUBLE, ["batch", 2]) for n in "ab")
    out = helper.make_tensor_value_info("sum", TensorProto.DOUBLE, [None, 2])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["sum"])], "add", [a, b], [out])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx_model.ir_version = 8
    path = model_folder(tmp_path, "add", {"framework": "onnx"}) / "add.onnx"
    path.write_bytes(onnx_model.SerializeToString())
    adapter = loaded(tmp_path / "add")
    assert adapter.signature() == (
        [spec("a", "FP64", [-1, 2]), spec("b", "FP64", [-1, 2])],
        [spec("sum", "FP64", [-1, 2])],
    )
    x = np.ones((3, 2))
    np.testing.assert_array_equal(adapter.predict({"a": x, "b": 2 * x})["sum"], 3 * x)
    with pytest.raises(InvalidInput, match="needs input 'b'"):
        adapter.predict({"a": x})


# -- XGBoost and LightGBM -------------------------------------------------------------------------


def test_xgboost_booster_and_sklearn_api(tmp_path: Path) -> None:
    xgb = pytest.importorskip("xgboost")
    x, y = iris()
    model = xgb.XGBClassifier(n_estimators=10, max_depth=2, n_jobs=1, random_state=0).fit(x, y)

    model.get_booster().save_model(
        str(model_folder(tmp_path, "b", {"framework": "xgboost"}) / "m.json")
    )
    adapter = loaded(tmp_path / "b")
    np.testing.assert_allclose(adapter.predict({"input-0": x})["output-0"], model.predict_proba(x))
    assert adapter.signature() == (
        [spec("input-0", "FP32", [-1, 4])],
        [spec("output-0", "FP32", [-1, 3])],
    )

    joblib.dump(model, model_folder(tmp_path, "s", {"framework": "xgboost"}) / "m.joblib")
    adapter = loaded(tmp_path / "s")
    out = adapter.predict({"input-0": x})
    np.testing.assert_array_equal(out["label"], model.predict(x))
    np.testing.assert_allclose(out["probabilities"], model.predict_proba(x))
    assert list(adapter.predict({"input-0": x}, ["probabilities"])) == ["probabilities"]
    assert adapter.signature()[1][0] == spec("label", "INT64", [-1])

    model_folder(tmp_path, "none", {"framework": "xgboost"})
    with pytest.raises(ConfigError, match=r"'none'.*no artifact matching.*\.ubj"):
        loaded(tmp_path / "none")


def test_lightgbm_booster_and_sklearn_api(tmp_path: Path) -> None:
    lgb = pytest.importorskip("lightgbm")
    x, y = iris()
    model = lgb.LGBMClassifier(n_estimators=10, num_leaves=4, n_jobs=1, verbose=-1).fit(x, y)

    model.booster_.save_model(str(model_folder(tmp_path, "b", {"framework": "lightgbm"}) / "m.txt"))
    adapter = loaded(tmp_path / "b")
    np.testing.assert_allclose(adapter.predict({"input-0": x})["output-0"], model.predict_proba(x))
    assert adapter.signature() == (
        [spec("input-0", "FP64", [-1, 4])],
        [spec("output-0", "FP64", [-1, 3])],
    )

    joblib.dump(model, model_folder(tmp_path, "s", {"framework": "lightgbm"}) / "m.pkl")
    adapter = loaded(tmp_path / "s")
    out = adapter.predict({"input-0": x}, ["label"])
    assert list(out) == ["label"]
    np.testing.assert_array_equal(out["label"], model.predict(x))

    (model_folder(tmp_path, "junk", {"framework": "lightgbm"}) / "m.txt").write_text("junk")
    with pytest.raises(ConfigError, match=r"'junk'.*cannot load .*m\.txt"):
        loaded(tmp_path / "junk")


# -- the demo repository --------------------------------------------------------------------------


def test_demo_repository_serves_its_samples(tmp_path: Path) -> None:
    messages: list[str] = []
    demo = build_demo_repository(tmp_path, progress=messages.append)
    assert {"digits-logreg", "iris-forest", "breast-cancer-mlp", "wine-onnx"} <= set(demo)
    repository = Repository.scan(tmp_path)
    assert repository.broken == {}
    assert sorted(repository.models) == sorted(demo)
    assert repository.get("digits-logreg").cache
    assert len(messages) >= len(demo)
    for name, sample in demo.items():
        config = repository.get(name)
        assert config.framework == sample.framework
        adapter = loaded(tmp_path / name)
        for tensor in config.inputs:  # the samples are what a client would send
            assert (tensor.name, numpy_dtype(tensor.datatype)) == (
                sample.input_name,
                sample.inputs.dtype,
            )
        outputs = adapter.predict(sample.request())
        assert len(sample.labels) == len(sample.inputs) > 0
        assert sample.accuracy(outputs) > 0.8, name


def test_sklearn_label_and_probabilities_from_one_pass(tmp_path: Path) -> None:
    """Both outputs cost one `predict_proba`, and the labels are exactly `predict`'s."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    x, y = datasets.load_wine(return_X_y=True)
    names = np.array(["barolo", "grignolino", "barbera"])
    estimators = {
        "logreg": make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)),
        "forest": RandomForestClassifier(n_estimators=15, random_state=0),
        "knn": KNeighborsClassifier(n_neighbors=4),  # even k: ties between classes
        "bayes": GaussianNB(),
        "svc": make_pipeline(StandardScaler(), SVC(probability=True, random_state=0)),
    }
    for name, estimator in estimators.items():
        with warnings.catch_warnings():  # scikit-learn 1.9 deprecates SVC(probability=True)
            warnings.simplefilter("ignore", FutureWarning)
            model = estimator.fit(x, names[y])
        joblib.dump(model, model_folder(tmp_path, name, {"framework": "sklearn"}) / "m.joblib")
        adapter = loaded(tmp_path / name)
        out = adapter.predict({"input-0": x})
        assert list(out) == ["label", "probabilities"]  # the order of the signature
        np.testing.assert_array_equal(out["label"], model.predict(x), err_msg=name)
        np.testing.assert_allclose(out["probabilities"], model.predict_proba(x), err_msg=name)
        # libsvm calibrates its probabilities apart from its decision: it keeps both calls
        assert adapter.labels_follow_probabilities == (name != "svc"), name

    calls: list[str] = []

    class Counted(LogisticRegression):
        def predict(self, x: Any) -> Any:
            calls.append("predict")
            return super().predict(x)

        def predict_proba(self, x: Any) -> Any:
            calls.append("predict_proba")
            return super().predict_proba(x)

    adapter = loaded(tmp_path / "logreg")
    adapter.model = Counted(max_iter=5000).fit(StandardScaler().fit_transform(x), y)
    adapter.predict({"input-0": x[:5]})
    assert calls == ["predict_proba"]
    adapter.predict({"input-0": x[:5]}, ["label"])
    assert calls == ["predict_proba", "predict"]
