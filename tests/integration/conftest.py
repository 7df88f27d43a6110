"""A real `headway serve` on loopback over a repository of real models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headway.launcher import ServerProcess
from tests.integration import models


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("repository")
    return root, models.build(root)


@pytest.fixture(scope="session")
def server(
    repository: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    root, _ = repository
    state = tmp_path_factory.mktemp("state") / "state.db"
    log = tmp_path_factory.mktemp("logs") / "server.log"
    with ServerProcess(root, state=state, workers=2, extra=["--max-body-mb", "1"], log=log) as srv:
        yield srv
