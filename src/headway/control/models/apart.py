"""Models kept apart: the competing copies of a flow stage, each a model of its own, race only
when they run on distinct workers (two copies on one worker run one after the other, and the
second can never win). Which workers such a model may take, given where its siblings are.
"""

from __future__ import annotations

from collections.abc import Mapping, Set


def apart_workers(
    placement: Mapping[int, Set[str]], siblings: Set[str], count: int
) -> tuple[list[int], int]:
    """Up to `count` workers that hold none of `siblings`, the least loaded first (then by
    number), and how many more workers must be started for `count`."""
    free = [w for w, keys in placement.items() if not keys & siblings]
    free.sort(key=lambda w: (len(placement[w]), w))
    chosen = free[:count]
    return chosen, count - len(chosen)


def workers_short(workers: int, copies: int) -> int:
    """How many workers must be started so that `copies` models kept apart find one each."""
    return max(0, copies - workers)
