"""Whether the request path's compiled modules (`headway.speedups`) are imported, decided once
as the package is imported, before any of them can be.

A build lies beside the sources with a manifest of their hashes. It is set aside, and the pure
modules imported, when ``HEADWAY_SPEEDUPS=0`` or when a source has changed since the build (with
a warning): an edit is never hidden by a stale build.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: The modules a request at 32 connections spends its Python in (cProfile of
#: `bench/request_path.py`), from the HTTP parse to the answer's bytes, and those of a refusal
#: under overload (`bench/refusal_python.py`): most of what an overloaded frontend reads.
MODULES = (
    "headway.api.app",
    "headway.api.closing",
    "headway.api.connection",
    "headway.api.inference",
    "headway.api.oip",
    "headway.api.parameters",
    "headway.api.refusals",
    "headway.api.rendering",
    "headway.control.admission.admit",
    "headway.control.admission.backlog",
    "headway.control.admission.drops",
    "headway.control.admission.overload",
    "headway.control.admission.reasons",
    "headway.control.admission.unread",
    "headway.control.controller",
    "headway.control.dispatch.messages",
    "headway.control.dispatch.relay",
    "headway.control.estimates.batch_size",
    "headway.control.estimates.durations",
    "headway.control.estimates.profiles",
    "headway.control.jobs",
    "headway.control.model_stats",
    "headway.control.models.states",
    "headway.control.models.validate",
    "headway.control.placement.queues",
    "headway.control.placement.slots",
    "headway.control.request",
    "headway.control.scheduling.choices",
    "headway.control.scheduling.outcomes",
    "headway.control.scheduling.queued_work",
    "headway.control.scheduling.scheduler",
    "headway.datatypes",
)
#: The group's shared runtime library, beside the ``headway`` package.
GROUP = "headway_speedups"
MANIFEST = "speedups-build.json"  # in the package: each compiled module's source hash
ENVIRONMENT = "HEADWAY_SPEEDUPS"


def source_root() -> Path:
    """The folder that holds the ``headway`` package (``src`` in a checkout)."""
    return Path(__file__).resolve().parent.parent


def source_path(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digests(root: Path, modules: Sequence[str] = MODULES) -> dict[str, str]:
    return {m: hashlib.sha256(source_path(root, m).read_bytes()).hexdigest() for m in modules}


def stale(root: Path, manifest: dict[str, str]) -> list[str]:
    """The compiled modules whose sources differ from what was compiled."""
    return sorted(m for m, digest in digests(root, list(manifest)).items() if manifest[m] != digest)


class PureSources(importlib.abc.MetaPathFinder):
    """Imports `modules` from their ``.py`` files although compiled ones lie beside them."""

    def __init__(self, root: Path, modules: Sequence[str]) -> None:
        self.root = root
        self.modules = frozenset(modules)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(self.root, fullname))


def choose(root: Path | None = None) -> bool:
    """Whether the compiled modules will be imported; if a build lies here but must not be
    used (switched off, or stale), puts `PureSources` first on the import path."""
    root = root or source_root()
    path = root / "headway" / MANIFEST
    if not path.exists():
        return False
    manifest: dict[str, str] = json.loads(path.read_text())
    use = os.environ.get(ENVIRONMENT, "1") != "0"
    if use:  # switched off, the pure modules run whatever the build's age: nothing to say
        changed = stale(root, manifest)
        if changed:
            warnings.warn(
                f"the speedups build is older than {', '.join(changed)}: running pure Python; "
                "rebuild with `python -m headway.speedups build` or remove it with `clean`",
                RuntimeWarning,
                stacklevel=2,
            )
            use = False
    if not use and not any(isinstance(f, PureSources) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, PureSources(root, list(manifest)))
    return use
