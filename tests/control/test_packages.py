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


def owner(node: ast.expr) -> str:
    """The name an attribute is read from: `c` of `c.x`, `controller` of `self.controller.x`."""
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def controller_names(tree: ast.Module) -> set[str]:
    """The names a module gives the controller: any ending in `controller`, and those bound
    to one (`c = self.controller`)."""
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and node.value is not None
            and owner(node.value).lower().endswith("controller")
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(owner(target) for target in targets)
    return names


def reaches(tree: ast.Module, parts: set[str]) -> list[str]:
    """Where `tree` reads one of the controller's `parts` (`line .part`)."""
    names = controller_names(tree)
    return sorted(
        f"{node.lineno} .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in parts
        and ((name := owner(node.value)) in names or name.lower().endswith("controller"))
    )


def test_a_reach_is_found_under_any_name_given_the_controller() -> None:
    source = """
def ready(self):
    c = self.app.controller
    return c.measuring.warming or self.controller.scheduler or c.status()
"""
    assert reaches(ast.parse(source), {"measuring", "scheduler"}) == [
        "4 .measuring",
        "4 .scheduler",
    ]


def test_nothing_outside_the_control_layer_reaches_into_the_controllers_parts() -> None:
    """Its callers use its doors and methods, and read what it did in `snapshots`
    (`Controller.statistics`): no `controller.<part>` (read from a name or attribute ending in
    `controller`, or bound to one) anywhere else in the package."""
    parts = controller_parts()
    source = CONTROL.parent
    reached = []
    for path in sorted(source.rglob("*.py")):
        if CONTROL in path.parents:
            continue
        tree = ast.parse(path.read_text(), str(path))
        reached += [f"{path.relative_to(source)}:{where}" for where in reaches(tree, parts)]
    assert reached == []
