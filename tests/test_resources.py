"""`resources:` in model.yaml: parsed with clear errors, and judged against a cluster's nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from headway.errors import ConfigError
from headway.repository import read_model
from headway.resources import DEFAULT, Resources, parse_resources, unmet


def test_defaults_one_cpu_and_nothing_else() -> None:
    assert parse_resources(None, "m") == DEFAULT == Resources(cpus=1.0)
    assert DEFAULT.demands() == {"CPU": 1.0}


def test_each_key_maps_to_the_name_a_ray_node_reports() -> None:
    parsed = parse_resources({"cpus": 2, "gpus": 0.5, "memory_mb": 512, "custom": {"tpu": 1}}, "m")
    assert parsed.demands() == {"CPU": 2.0, "GPU": 0.5, "memory": 512 * 2**20, "tpu": 1.0}


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ([1], "must be a mapping"),
        ({"cpu": 1}, "unknown resources ['cpu']"),
        ({"cpus": -1}, "resources.cpus"),
        ({"gpus": True}, "resources.gpus"),
        ({"custom": ["tpu"]}, "resources.custom"),
        ({"custom": {"tpu": "one"}}, "resources.custom.tpu"),
    ],
)
def test_bad_resources_are_a_config_error_naming_the_key(raw: object, named: str) -> None:
    with pytest.raises(ConfigError, match=r"m\.yaml: .*") as error:
        parse_resources(raw, "m.yaml")
    assert named in error.value.message


def test_a_model_yaml_declares_them(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(
        "framework: sklearn\nresources: {cpus: 2, custom: {accel: 1}}\n"
    )
    assert read_model(tmp_path / "m").resources == Resources(cpus=2.0, custom={"accel": 1.0})


NODES = [{"CPU": 4.0, "memory": 8e9}, {"CPU": 2.0, "GPU": 1.0, "accel": 1.0}]


def test_a_worker_fits_when_one_node_has_all_it_needs() -> None:
    assert unmet(DEFAULT, NODES) is None
    assert unmet(Resources(cpus=2, gpus=1, custom={"accel": 1}), NODES) is None


def test_what_no_node_has_is_named() -> None:
    reason = unmet(Resources(custom={"tpu": 2}), NODES)
    assert reason is not None and "tpu 2" in reason and "2 alive" in reason
    assert "CPU" not in reason.split(" and ")[0]  # only what is missing


def test_resources_spread_over_two_nodes_do_not_fit_one_worker() -> None:
    reason = unmet(Resources(cpus=4, gpus=1), NODES)  # 4 CPUs on one node, the GPU on the other
    assert reason is not None and "CPU 4" in reason and "GPU 1" in reason


def test_local_gpus_counts_the_driver_s_gpu_folders(tmp_path: Path) -> None:
    from headway.resources import local_gpus

    assert local_gpus(str(tmp_path)) == 0
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / "proc/driver/nvidia/gpus" / bus).mkdir(parents=True)
    assert local_gpus(str(tmp_path)) == 2
