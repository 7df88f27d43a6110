"""A competing stage's copies on distinct workers (`control.models.apart`, `keep_apart`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headway.clock import ManualClock
from headway.control.controller import Controller
from headway.control.models.apart import apart_workers, workers_short
from headway.errors import ConfigError
from headway.repository import Repository
from headway.testing import FakeEngine


def test_a_copy_takes_the_least_loaded_worker_holding_no_sibling() -> None:
    placement = {0: {"c0", "other"}, 1: {"x", "y"}, 2: {"z"}, 3: set()}
    assert apart_workers(placement, {"c0"}, 1) == ([3], 0)
    assert apart_workers(placement, {"c0"}, 3) == ([3, 2, 1], 0)
    assert apart_workers({0: {"c0"}}, {"c0"}, 1) == ([], 1)
    assert workers_short(1, 3) == 2 and workers_short(4, 2) == 0


def repository(tmp_path: Path) -> Repository:
    for name in ("c0", "c1", "c2"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "model.yaml").write_text("framework: python\nentrypoint: m.py:M\n")
    return Repository.scan(tmp_path)


def test_copies_are_refused_with_the_reason_when_no_worker_can_be_started(
    tmp_path: Path,
) -> None:
    controller = Controller(repository(tmp_path), FakeEngine(size=1), clock=ManualClock())
    with pytest.raises(ConfigError, match="races 3 copies, which need 3 distinct workers"):
        controller.keep_apart(["c0", "c1", "c2"], "app 'a': stage 's'")
    assert controller.lifecycle.apart == {}


class GrowingEngine(FakeEngine):
    """A fake engine that starts workers when asked (as the local engine does)."""

    def grow(self, config: object) -> int | None:
        self.size += 1
        return self.size - 1


def test_the_engine_starts_the_workers_copies_need_and_each_copy_gets_its_own(
    tmp_path: Path,
) -> None:
    engine = GrowingEngine(size=1)
    controller = Controller(repository(tmp_path), engine, clock=ManualClock())
    controller.keep_apart(["c0", "c1", "c2"], "app 'a': stage 's'")
    assert sorted(controller.lifecycle.placement) == [0, 1, 2]
    lifecycle = controller.lifecycle
    places = []
    for name in ("c0", "c1", "c2"):
        config = lifecycle.model(name).config
        (worker,) = lifecycle.place(config)
        lifecycle.placement[worker].add(config.key)
        places.append(worker)
    assert sorted(places) == [0, 1, 2]
