"""The control layer's packages import one way: each only those before it, so a reader can name
who decides what without finding two packages that ask each other (`headway/control/__init__`).

Read from the source, every import counted: at the top, inside functions, and for type
checking alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

CONTROL = Path(__file__).resolve().parents[2] / "src" / "headway" / "control"

#: The order of the packages: a module may import its own package's modules and those of the
#: packages before it. The shared records come first; the controller last.
ORDER = (
    ("request", "jobs", "actions", "engine", "model_stats", "policy", "snapshots"),
    ("estimates",),
    ("placement",),
    ("admission",),
    ("scheduling",),
    ("models",),
    ("dispatch",),
    ("cache",),
    ("controller", "doors"),
)
RANK = {name: rank for rank, names in enumerate(ORDER) for name in names}


def unit(module: str) -> str:
    """The package (or top-level module) of `headway.control.<module...>`."""
    return module.removeprefix("headway.control.").split(".")[0]


def imports(path: Path) -> set[str]:
    """The control modules `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.startswith("headway.control.")}


def test_every_package_of_the_control_layer_has_its_place() -> None:
    units = {p.stem if p.is_file() else p.name for p in CONTROL.iterdir()}
    units -= {"__init__", "__pycache__"}
    assert units == set(RANK)


def test_each_package_imports_only_those_before_it() -> None:
    upward = []
    for path in sorted(CONTROL.rglob("*.py")):
        here = path.relative_to(CONTROL).parts[0].removesuffix(".py")
        if here == "__init__":
            continue
        for module in imports(path):
            there = unit(module)
            # the shared records import one another, and nothing of the packages
            allowed = (
                RANK[there] == 0 if RANK[here] == 0 else there == here or RANK[there] < RANK[here]
            )
            if not allowed:
                upward.append(f"{path.relative_to(CONTROL)} -> {module}")
    assert upward == []


#: What callers may read of the controller beside its methods: what it was given or is (its
#: repository, clock, store and policy) and whether it started. Every other attribute it sets
#: is one of its parts.
PUBLIC = {"repository", "clock", "store", "policy", "started", "on_demand", "ready_timeout"}
#: Parts it had or may have again under these names, banned whether or not it sets them now.
FORMER_PARTS = {
    "dispatch", "admission", "backlogs", "durations", "estimator", "stats", "models",
    "versions", "placement", "queues", "unread", "cache",
}  # fmt: skip


def controller_parts() -> set[str]:
    """The attributes `Controller.__init__` sets, less `PUBLIC`, with `FORMER_PARTS`."""
    tree = ast.parse((CONTROL / "controller.py").read_text())
    init = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    set_here = {
        node.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }
    return (set_here - PUBLIC) | FORMER_PARTS


def test_the_parts_are_read_from_the_controller_itself() -> None:
    parts = controller_parts()
    assert {"scheduler", "relay", "measuring", "lifecycle", "engine", "unread"} <= parts
    assert not parts & PUBLIC


def test_nothing_outside_the_control_layer_reaches_into_the_controllers_parts() -> None:
    """Its callers use its doors and methods, and read what it did in `snapshots`
    (`Controller.statistics`): no `controller.<part>` (a name or attribute ending in
    `controller`) anywhere else in the package."""
    parts = controller_parts()
    source = CONTROL.parent
    reached = []
    for path in sorted(source.rglob("*.py")):
        if CONTROL in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Attribute) and node.attr in parts):
                continue
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name.lower().endswith("controller"):
                reached.append(f"{path.relative_to(source)}:{node.lineno} .{node.attr}")
    assert reached == []
