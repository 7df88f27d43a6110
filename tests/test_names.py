"""One class per name across the package, read from the source.

Two classes of one name (a flow's `Plan` and the planner's, three `Trace`s) make a reader, a
traceback or a search find the wrong one; each name should say which thing it is.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "headway"


def classes() -> dict[str, list[str]]:
    """Each class name defined in the package (nested classes too), with where."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_no_two_classes_share_a_name() -> None:
    shared = {name: where for name, where in classes().items() if len(where) > 1}
    assert shared == {}
