"""A flow file is code the server imports: a name from the admin API reaches only files of the
model repository; one from the `--config` file also those beside it (`flows.source.confined`).
A refused file is never imported."""

from __future__ import annotations

from pathlib import Path

import pytest

from headway.apps import load_config, parse_app
from headway.errors import ConfigError
from headway.repository import Repository

FLOW = """
from pathlib import Path
from headway.flows import Flow

Path({marker!r}).write_text("imported")


def double(x: float) -> float:
    return 2 * x


flow = Flow("f", {{"x": float}})
flow.map(double, col="x")
"""


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Repository, Path, Path]:
    """A repository with `flows/ok.py`, a file outside it, and the marker both write."""
    root, outside, marker = tmp_path / "repository", tmp_path / "outside", tmp_path / "ran"
    (root / "flows").mkdir(parents=True)
    outside.mkdir()
    for folder in (root / "flows", outside):
        (folder / ("ok.py" if folder.parent == root else "evil.py")).write_text(
            FLOW.format(marker=str(marker))
        )
    return Repository.scan(root), outside / "evil.py", marker


def test_the_api_may_name_a_flow_file_of_the_repository(
    layout: tuple[Repository, Path, Path],
) -> None:
    repository, _, _ = layout
    for spec in ("flows/ok.py:flow", f"{repository.root / 'flows' / 'ok.py'}:flow"):
        config = parse_app("a", {"flow": spec}, repository)
        assert config.flow == f"{(repository.root / 'flows' / 'ok.py').resolve()}:flow"


def test_the_api_may_not_name_a_file_outside_the_repository(
    layout: tuple[Repository, Path, Path],
) -> None:
    repository, evil, marker = layout
    root = repository.root
    (root / "flows" / "linked.py").symlink_to(evil)
    for spec in (
        f"{evil}:flow",  # absolute
        "../outside/evil.py:flow",  # through ..
        "flows/linked.py:flow",  # a link out of the repository
        "/etc/passwd.py:flow",  # outside, and not even there: refused the same way
    ):
        with pytest.raises(ConfigError) as refused:
            parse_app("pwn", {"flow": spec}, repository)
        message = refused.value.message
        assert "outside" in message and str(root.resolve()) in message, message
        if "passwd" not in spec:
            assert str(evil.resolve()) in message, message
    assert not marker.exists(), "a flow file outside the repository was imported"


def test_the_config_may_name_a_flow_file_beside_it(
    layout: tuple[Repository, Path, Path], tmp_path: Path
) -> None:
    repository, evil, _ = layout
    folder = tmp_path / "config"
    folder.mkdir()
    (folder / "mine.py").write_text((repository.root / "flows" / "ok.py").read_text())
    config = folder / "headway.yaml"
    config.write_text("apps:\n  mine: {flow: mine.py:flow}\n  repo: {flow: flows/ok.py:flow}\n")
    with pytest.raises(ConfigError, match="does not exist"):  # relative: to the config's folder
        load_config(config, repository)
    config.write_text(
        f"apps:\n  mine: {{flow: mine.py:flow}}\n"
        f"  repo: {{flow: {repository.root / 'flows' / 'ok.py'}:flow}}\n"
    )
    apps = load_config(config, repository)
    assert apps["mine"].flow == f"{(folder / 'mine.py').resolve()}:flow"
    config.write_text(f"apps:\n  pwn: {{flow: {evil}:flow}}\n")
    with pytest.raises(ConfigError, match="outside"):
        load_config(config, repository)
    assert load_config(config)["pwn"].flow  # an offline tool (headway plan) is not confined
