"""Fixtures shared by the API tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def yields(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts `os.sched_yield` calls: one per loop turn the poller kept the loop awake for."""
    count = [0]
    real = os.sched_yield

    def counting() -> None:
        count[0] += 1
        real()

    monkeypatch.setattr(os, "sched_yield", counting)
    return count
