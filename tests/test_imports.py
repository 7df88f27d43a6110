"""The package's imports, read from the source: no import circles, and layers that call downward.

DESIGN.md's layers: transport (`api`) -> apps (`apps`, `flows`, `selection`) -> control ->
runtime (`runtime`, `adapters`) -> store. A circle (counting imports inside functions and for type
checking), or a lower layer that imports a higher one, is a seam that has worn through; these
tests name the modules that make it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"


def module_names() -> dict[str, Path]:
    names = {}
    for path in sorted((SOURCE / "headway").rglob("*.py")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


MODULES = module_names()


@functools.cache
def tree(name: str) -> ast.Module:
    path = MODULES[name]
    return ast.parse(path.read_text(), str(path))


def top_level(body: list[ast.stmt], typing: bool) -> Iterator[ast.stmt]:
    """The statements a module runs when imported (with `typing`: and its `TYPE_CHECKING`
    blocks), through `if` and `try`, not into functions or classes."""
    for statement in body:
        if isinstance(statement, ast.If):
            if "TYPE_CHECKING" in ast.unparse(statement.test):
                yield from top_level(statement.body if typing else statement.orelse, typing)
                continue
            yield from top_level(statement.body, typing)
            yield from top_level(statement.orelse, typing)
        elif isinstance(statement, ast.Try):
            for block in (statement.body, *(h.body for h in statement.handlers)):
                yield from top_level(block, typing)
            yield from top_level(statement.orelse, typing)
            yield from top_level(statement.finalbody, typing)
        else:
            yield statement


def imported(name: str, nodes: Iterator[ast.AST]) -> set[str]:
    """The package's modules that `nodes` (of module `name`) import."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in MODULES and m != name}


def graph(*, typing: bool) -> dict[str, set[str]]:
    """Each module's imports at import time (with `typing`: and for type checking)."""
    return {name: imported(name, top_level(tree(name).body, typing)) for name in MODULES}


@functools.cache
def everything_imported() -> dict[str, set[str]]:
    """Each module's imports anywhere in it, inside functions too."""
    return {name: imported(name, ast.walk(tree(name))) for name in MODULES}


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_reader_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back_when_imported() -> None:
    assert circles(graph(typing=False)) == []


def test_no_import_circle_through_type_checking_imports() -> None:
    assert circles(graph(typing=True)) == []


def test_no_import_circle_through_imports_inside_functions() -> None:
    """An import deferred into a function still ties the two modules together: it only hides
    the circle from the interpreter until the function runs."""
    assert circles(everything_imported()) == []


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else ""


#: What each lower layer must never import, even lazily (inside a function).
FORBIDDEN = {
    "control": {"api", "apps", "flows", "selection", "planning", "sim", "cli", "client",
                "loadgen", "runtime", "adapters"},
    "store": {"api", "apps", "flows", "selection", "planning", "sim", "cli", "client",
              "loadgen", "runtime", "adapters", "control"},
    "runtime": {"api", "apps", "selection", "planning", "sim", "cli", "client", "loadgen"},
    "adapters": {"api", "apps", "selection", "planning", "sim", "cli", "client", "loadgen",
                 "runtime", "control"},
}  # fmt: skip


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in everything_imported().items()
        if package(module) == layer
        for target in targets
        if package(target) in FORBIDDEN[layer]
    )
    assert upward == []


def test_the_runtime_knows_of_control_only_the_engine_contract() -> None:
    """The runtime implements `control.engine` (the protocol and its typed messages), and
    depends on nothing else of the control layer."""
    reached = {
        target
        for module, targets in everything_imported().items()
        if package(module) == "runtime"
        for target in targets
        if package(target) == "control"
    }
    assert reached <= {"headway.control.engine", "headway.control"}


def test_no_module_imports_the_test_doubles() -> None:
    """`headway.testing` is for tests: the simulator's workers are `headway.sim.workers`."""
    importers = sorted(
        module for module, targets in everything_imported().items() if "headway.testing" in targets
    )
    assert importers == []


def imported_test_modules(path: Path) -> set[str]:
    """The test modules (`tests/**/test_*.py`) that the file at `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            module = ROOT.joinpath(*name.split(".")).with_suffix(".py")
            if name.startswith("tests.") and module.stem.startswith("test_") and module.exists():
                found.add(name)
    return found


def test_no_test_module_imports_another() -> None:
    """What tests share lives in helper modules (`tests/api/echo_server.py`,
    `tests/integration/oip_client.py`, `tests/processes.py`, ...): a test module that imports
    another collects nothing of it but ties the two files' helpers and tests together."""
    importers = sorted(
        f"{path.relative_to(ROOT)} -> {', '.join(sorted(imported))}"
        for path in (ROOT / "tests").rglob("*.py")
        if (imported := imported_test_modules(path))
    )
    assert importers == []
