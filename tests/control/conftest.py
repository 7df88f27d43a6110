from __future__ import annotations

import pytest

from headway.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
