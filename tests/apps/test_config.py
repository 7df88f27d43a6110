"""Application configuration: the YAML `apps:` section into typed, checked AppConfigs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headway.apps import AppConfig, ModelRef, load_config, parse_app, parse_apps
from headway.errors import ConfigError
from headway.repository import Repository


@pytest.fixture
def repository(tmp_path: Path) -> Repository:
    """A real repository folder: clf (versions 1, 2), reg, and one whose model.yaml is broken."""
    for name, versions, yaml in (
        ("clf", (1, 2), "framework: sklearn\n"),
        ("reg", (1,), "framework: sklearn\n"),
        ("bad", (1,), "framework: cobol\n"),
    ):
        for version in versions:
            (tmp_path / name / str(version)).mkdir(parents=True)
        (tmp_path / name / "model.yaml").write_text(yaml)
    return Repository.scan(tmp_path)


def test_the_issue_example_parses_with_its_defaults(repository: Repository) -> None:
    config = parse_app(
        "digits",
        {
            "models": ["clf", "reg@1"],
            "policy": "exp4",
            "slo_ms": 100,
            "default_output": -1,
            "confidence_threshold": 0.6,
            "personalize": True,
        },
        repository,
    )
    assert config == AppConfig(
        name="digits",
        models=("clf", "reg@1"),
        policy="exp4",
        slo_ms=100.0,
        default_output=-1,
        confidence_threshold=0.6,
        personalize=True,
    )
    assert config.refs == [ModelRef("clf"), ModelRef("reg", 1)]
    policy = config.build_policy()
    assert (policy.name, policy.models, policy.threshold) == ("exp4", ["clf", "reg@1"], 0.6)


def test_minimal_app_is_fixed_on_its_first_model() -> None:
    config = parse_app("a", {"models": ["clf"]})
    assert (config.policy, config.slo_ms, config.default_output) == ("fixed", 1000.0, None)
    assert config.build_policy().config()["split"] == {"clf": 1.0}


def test_to_dict_is_the_yaml_shape_and_parses_back(repository: Repository) -> None:
    raw: dict[str, Any] = {
        "models": ["clf@1", "clf@2"],
        "policy": "fixed",
        "split": {"clf@1": 0.9, "clf@2": 0.1},
        "default_output": {"label": "unknown"},
    }
    config = parse_app("canary", raw, repository)
    assert parse_app("canary", config.to_dict(), repository) == config
    assert "eta" not in config.to_dict() and config.to_dict()["models"] == ["clf@1", "clf@2"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"models": ["clf"], "polcy": "exp3"}, "unknown key(s) ['polcy']"),
        ({"models": []}, "models must be a non-empty list"),
        ({"models": "clf"}, "models must be a non-empty list"),
        ({"models": ["clf", "clf"]}, "lists a model twice"),
        ({"models": ["clf@x"]}, "'clf@x' is not a model name"),
        ({"models": [3]}, "a model must be a name"),
        ({"models": ["clf"], "policy": "exp5"}, "policy must be one of"),
        ({"models": ["clf"], "eta": 0.1}, "eta applies to policy exp3 or exp4 only"),
        ({"models": ["clf"], "policy": "exp3", "tolerance": 0.1}, "tolerance applies to"),
        ({"models": ["clf"], "policy": "exp3", "split": {"clf": 1}}, "split applies to"),
        ({"models": ["clf"], "policy": "exp3", "eta": -1}, "eta must be at least"),
        ({"models": ["clf"], "policy": "exp3", "eta": "fast"}, "eta must be a number"),
        ({"models": ["clf"], "slo_ms": 0}, "slo_ms must be at least"),
        ({"models": ["clf"], "slo_ms": True}, "slo_ms must be a number"),
        ({"models": ["clf"], "confidence_threshold": 1.5}, "within [0, 1]"),
        ({"models": ["clf"], "personalize": "yes"}, "personalize must be true or false"),
        ({"models": ["clf"], "task": "ranking"}, "task must be one of"),
        ({"models": ["clf"], "split": {"reg": 1}}, "split names models that are not linked"),
        ({"models": ["clf"], "split": {"clf": -1}}, "split[clf] must be at least 0"),
        ({"models": ["clf", "reg"], "active": "nope"}, "active must be one of its models"),
        ({"models": ["clf"], "split": {"clf": 1}, "active": "clf"}, "either a traffic split"),
        ({"models": ["nope"]}, "models: 'nope': no such model"),
        ({"models": ["clf@3"]}, "models: 'clf@3': no version 3; it has [1, 2]"),
        ({"models": ["bad"]}, "models: 'bad': cannot be served"),
        (["clf"], "must be a mapping"),
    ],
)
def test_errors_name_the_app_and_the_key(repository: Repository, raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_app("digits", raw, repository)
    assert caught.value.message.startswith("app 'digits': ")
    assert message in caught.value.message


def test_the_document_has_an_apps_section_only() -> None:
    assert parse_apps(None) == {}
    assert parse_apps({"apps": None}) == {}
    assert list(parse_apps({"apps": {"a": {"models": ["x"]}, "b": {"models": ["y"]}}})) == [
        "a",
        "b",
    ]
    with pytest.raises(ConfigError, match=r"unknown top-level key\(s\) \['models'\]"):
        parse_apps({"models": []})
    with pytest.raises(ConfigError, match="apps: must map"):
        parse_apps({"apps": ["a"]})
    with pytest.raises(ConfigError, match="an app name may use"):
        parse_apps({"apps": {"a b": {"models": ["x"]}}})


def test_load_config_names_the_file(tmp_path: Path, repository: Repository) -> None:
    path = tmp_path / "headway.yaml"
    path.write_text("apps:\n  digits:\n    models: [clf, reg]\n    policy: exp3\n    eta: 0.05\n")
    (config,) = load_config(path, repository).values()
    assert (config.policy, config.eta, config.models) == ("exp3", 0.05, ("clf", "reg"))
    path.write_text("apps:\n  digits:\n    models: [clf]\n    slo_ms: -5\n")
    with pytest.raises(ConfigError, match=r"headway.yaml: app 'digits': slo_ms must be"):
        load_config(path, repository)
    path.write_text("apps: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(path, repository)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(tmp_path / "missing.yaml", repository)
