"""Reading a model repository: one-line model.yaml defaults, versions, and errors naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from headway.errors import ConfigError, ModelNotFound
from headway.repository import ModelConfig, Repository, TensorSpec, read_model


def model(root: Path, name: str, yaml: str, versions: tuple[str, ...] = ("1",)) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "model.yaml").write_text(yaml)
    for version in versions:
        (folder / version).mkdir()
    return folder


def error(folder: Path) -> str:
    with pytest.raises(ConfigError) as info:
        read_model(folder)
    return info.value.message


def test_one_line_model_yaml_gets_defaults(tmp_path: Path) -> None:
    config = read_model(model(tmp_path, "iris", "framework: sklearn\n"))
    assert config == ModelConfig(
        name="iris",
        version=1,
        framework="sklearn",
        path=tmp_path / "iris" / "1",
        versions=(1,),
    )
    assert config.max_batch_size == 32
    assert config.batch_delay_ms == 0.0
    assert config.slo_ms == 1000.0
    assert config.replicas == 1
    assert config.max_queue == 4096
    assert config.cache is False
    assert config.inputs == () and config.outputs == ()
    assert config.key == "iris@1"
    assert config.platform == "sklearn_headway"


def test_highest_version_is_served(tmp_path: Path) -> None:
    folder = model(tmp_path, "m", "framework: onnx\n", versions=("1", "10", "2"))
    (folder / "notes").mkdir()  # not a version
    config = read_model(folder)
    assert config.version == 10  # numerically highest, not lexically
    assert config.versions == (1, 2, 10)
    assert config.path == folder / "10"
    assert config.platform == "onnxruntime_onnx"


def test_pinned_version(tmp_path: Path) -> None:
    config = read_model(model(tmp_path, "m", "framework: torch\nversion: 2\n", ("1", "2", "3")))
    assert config.version == 2
    assert config.path == tmp_path / "m" / "2"


def test_full_model_yaml(tmp_path: Path) -> None:
    yaml = """
framework: python
entrypoint: model.py:Echo
max_batch_size: 8
batch_delay_ms: 2.5
slo_ms: 50
replicas: 2
max_queue: 100
cache: true
memory_mb: 512
options: {threads: 2}
inputs:
  - {name: x, datatype: fp32, shape: [-1, 4]}
  - {name: t}
outputs:
  - {name: y, datatype: INT64, shape: [-1]}
"""
    config = read_model(model(tmp_path, "echo", yaml))
    assert (config.max_batch_size, config.batch_delay_ms, config.slo_ms) == (8, 2.5, 50.0)
    assert (config.replicas, config.max_queue, config.cache, config.memory_mb) == (
        2,
        100,
        True,
        512.0,
    )
    assert config.entrypoint == "model.py:Echo"
    assert config.options == {"threads": 2}
    assert config.inputs == (
        TensorSpec("x", "FP32", (-1, 4)),
        TensorSpec("t", "FP32", (-1,)),  # datatype and shape default
    )
    assert config.outputs == (TensorSpec("y", "INT64", (-1,)),)
    wire = config.to_wire()
    assert wire["inputs"][0] == {"name": "x", "datatype": "FP32", "shape": [-1, 4]}
    assert wire["path"] == str(tmp_path / "echo" / "1")


def test_signature_from_the_adapter_fills_only_what_yaml_left_out(tmp_path: Path) -> None:
    yaml = "framework: sklearn\ninputs: [{name: x, shape: [-1, 4]}]\n"
    config = read_model(model(tmp_path, "m", yaml))
    inferred_in = (TensorSpec("input-0", "FP64", (-1, 4)),)
    inferred_out = (TensorSpec("label", "INT64", (-1,)),)
    filled = config.with_signature(inferred_in, inferred_out)
    assert filled.inputs == config.inputs
    assert filled.outputs == inferred_out


@pytest.mark.parametrize(
    ("yaml", "versions", "message"),
    [
        (
            "framework: tensorflow\n",
            ("1",),
            "framework must be one of ['python', 'sklearn', 'torch', 'onnx', 'xgboost', "
            "'lightgbm'], got 'tensorflow'",
        ),
        ("{}\n", ("1",), "framework must be one of"),
        ("framework: sklearn\nbatch_size: 4\n", ("1",), "unknown keys ['batch_size']; known: ["),
        ("framework: sklearn\n", (), "no version folder (e.g. m/1/) holds an artifact"),
        ("framework: sklearn\nversion: 3\n", ("1", "2"), "pinned version 3 is not among [1, 2]"),
        ("framework: python\n", ("1",), "framework 'python' needs 'entrypoint: file.py:ClassName'"),
        ("- framework: sklearn\n", ("1",), "must be a mapping like 'framework: sklearn'"),
        ("framework: [sklearn\n", ("1",), "cannot be read: "),
        (
            "framework: sklearn\ninputs: [{name: x, datatype: FLOAT}]\n",
            ("1",),
            "tensor 'x' has unknown datatype 'FLOAT'",
        ),
        (
            "framework: sklearn\ninputs: [{name: x, shape: [-2, 4]}]\n",
            ("1",),
            "tensor 'x' shape must be a list of ints >= -1",
        ),
        (
            "framework: sklearn\noutputs: [{datatype: FP32}]\n",
            ("1",),
            "each tensor needs at least a name, got {'datatype': 'FP32'}",
        ),
        (
            "framework: sklearn\ninputs: {name: x}\n",
            ("1",),
            "inputs must be a list of tensors like {name, datatype, shape}",
        ),
        ("framework: sklearn\noutputs: 5\n", ("1",), "outputs must be a list of tensors"),
        (
            "framework: sklearn\noptions: [threads, 2]\n",
            ("1",),
            "options must be a mapping, got ['threads', 2]",
        ),
        (
            "framework: sklearn\nmax_batch_size: -1\n",
            ("1",),
            "max_batch_size must be a non-negative number, got -1",
        ),
        ("framework: sklearn\nslo_ms: fast\n", ("1",), "slo_ms must be a non-negative number"),
        (
            "framework: sklearn\nreplicas: 0\n",
            ("1",),
            "max_batch_size and replicas must be at least 1",
        ),
    ],
)
def test_errors_name_the_file(
    tmp_path: Path, yaml: str, versions: tuple[str, ...], message: str
) -> None:
    folder = model(tmp_path, "m", yaml, versions)
    text = error(folder)
    assert text.startswith(f"{folder / 'model.yaml'}: "), text
    assert message in text, text


def test_model_name_must_be_plain(tmp_path: Path) -> None:
    folder = model(tmp_path, "bad name", "framework: sklearn\n")
    assert "model name 'bad name' may use letters" in error(folder)


def test_scan_collects_models_and_broken_ones(tmp_path: Path) -> None:
    model(tmp_path, "good", "framework: sklearn\n")
    model(tmp_path, "also-good", "framework: xgboost\n", ("3",))
    model(tmp_path, "nofw", "framework: caffe\n")
    model(tmp_path, "badopts", "framework: sklearn\noptions: [1, 2]\n")
    (tmp_path / "not-a-model").mkdir()  # no model.yaml: not part of the repository
    (tmp_path / "README.md").write_text("models live here")
    repo = Repository.scan(tmp_path)
    assert sorted(repo.models) == ["also-good", "good"]
    assert sorted(repo.broken) == ["badopts", "nofw"]
    assert "framework must be one of" in repo.broken["nofw"]
    assert repo.broken["nofw"].startswith(str(tmp_path / "nofw" / "model.yaml"))
    assert "options must be a mapping" in repo.broken["badopts"]

    assert repo.get("good").framework == "sklearn"
    with pytest.raises(ModelNotFound, match=r"model 'nofw' cannot be served: .*framework must be"):
        repo.get("nofw")
    with pytest.raises(ModelNotFound, match=r"unknown model 'zzz'; the repository has \["):
        repo.get("zzz")


def test_any_version_can_be_asked_for(tmp_path: Path) -> None:
    model(tmp_path, "m", "framework: sklearn\n", ("1", "2"))
    repo = Repository.scan(tmp_path)
    assert repo.version("m", 2) is repo.get("m")
    old = repo.version("m", 1)
    assert (old.version, old.path, old.key) == (1, tmp_path / "m" / "1", "m@1")
    with pytest.raises(ModelNotFound, match=r"model 'm' has no version 7; it has \[1, 2\]"):
        repo.version("m", 7)


def test_scan_needs_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a folder"):
        Repository.scan(tmp_path / "missing")


@pytest.mark.parametrize("lazy", [False, True])
def test_frameworks_lists_what_the_models_use_without_reading_a_lazy_index(
    tmp_path: Path, lazy: bool
) -> None:
    model(tmp_path, "a", "framework: sklearn\n")
    model(tmp_path, "b", "# a comment\nframework: 'torch'\nmax_batch_size: 8\n")
    model(tmp_path, "c", "framework: sklearn\n")
    repository = Repository.scan(tmp_path, lazy=lazy)
    assert repository.frameworks() == ["sklearn", "torch"]
    assert len(repository.models) == (0 if lazy else 3)  # still unread when lazy


def test_a_model_reaches_only_inside_its_folder(tmp_path: Path) -> None:
    root, outside = tmp_path / "repo", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "code.py").write_text("X = 1\n")
    entry = "framework: python\nentrypoint: {}:X\n"
    # Inside the model folder, `..` from the version folder is fine.
    (model(root, "shared", entry.format("../code.py")) / "code.py").write_text("X = 1\n")
    assert read_model(root / "shared").entrypoint == "../code.py:X"
    assert "absolute path" in error(model(root, "absolute", entry.format(outside / "code.py")))
    assert "outside" in error(model(root, "dotdot", entry.format("../../../outside/code.py")))
    # A version folder, or the model folder itself, that is a link out of the repository.
    linked_version = model(root, "version-link", "framework: sklearn\n", ())
    (linked_version / "1").symlink_to(outside, target_is_directory=True)
    assert "outside" in error(linked_version)
    model(outside, "elsewhere", "framework: sklearn\n")
    (root / "folder-link").symlink_to(outside / "elsewhere", target_is_directory=True)
    # A link to another folder inside the repository stays inside it.
    (root / "alias").symlink_to(root / "shared", target_is_directory=True)
    repo = Repository.scan(root)
    assert sorted(repo.models) == ["alias", "shared"]
    assert sorted(repo.broken) == ["absolute", "dotdot", "folder-link", "version-link"]
    assert "outside" in repo.broken["folder-link"]
