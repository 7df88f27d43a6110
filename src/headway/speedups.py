"""The request path compiled to C with mypyc: an optional build, used only where it was built.

At 32 connections the frontend's one Python thread is the ceiling, and its cost is the
interpreter's per-operation overhead spread over the whole path, not one function. mypyc
compiles the typed modules of that path (`headway.compiled.MODULES`) to C extension modules
placed beside their sources, which Python then imports in their place. Nothing changes unless
someone runs ``python -m headway.speedups build`` (it needs mypy, from the ``speedups`` extra,
and a C compiler); ``clean`` removes the build and ``status`` says what runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

from headway.compiled import (
    ENVIRONMENT,
    GROUP,
    MANIFEST,
    MODULES,
    digests,
    source_path,
    source_root,
    stale,
)


def built_files(root: Path) -> list[Path]:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    files = [source_path(root, m).with_suffix(suffix) for m in MODULES]
    files.append(root / f"{GROUP}__mypyc{suffix}")
    return [f for f in files if f.exists()]


def clean(root: Path) -> list[Path]:
    """Removes the build (its manifest first, so that no half-removed build is used)."""
    (root / "headway" / MANIFEST).unlink(missing_ok=True)
    removed = built_files(root)
    for file in removed:
        file.unlink()
    return removed


def build(root: Path, opt_level: str = "3") -> None:
    """Compiles `MODULES` under `root` in place (a minute or two of CPU); raises RuntimeError,
    quoting the compiler, where it cannot."""
    clean(root)
    if shutil.which(os.environ.get("CC", "cc")) is None:
        raise RuntimeError("no C compiler (cc) on PATH; install one (Debian: gcc) to build")
    paths = [str(source_path(root, m).relative_to(root)) for m in MODULES]
    manifest = digests(root)  # the sources as compiled
    with tempfile.TemporaryDirectory(prefix="headway-speedups-") as temp:
        setup = (
            "from mypyc.build import mypycify\nfrom setuptools import setup\n"
            f"modules = mypycify({paths!r} + ['--ignore-missing-imports', "
            f"'--python-version', '3.11'], opt_level={opt_level!r}, group_name={GROUP!r}, "
            f"target_dir={temp + '/c'!r})\n"
            "setup(name='headway-speedups', ext_modules=modules, script_args=['build_ext', "
            f"'--inplace', '--build-temp', {temp + '/o'!r}, '--build-lib', {temp + '/l'!r}])\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", setup], cwd=root, capture_output=True, text=True
        )
    if done.returncode != 0:
        raise RuntimeError(f"mypyc could not build the speedups:\n{done.stdout[-3000:]}"
                           f"{done.stderr[-3000:]}")  # fmt: skip
    (root / "headway" / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def status(root: Path) -> str:
    path = root / "headway" / MANIFEST
    if not path.exists():
        return "no speedups build: the request path runs as pure Python"
    changed = stale(root, json.loads(path.read_text()))
    if changed:
        return f"a stale speedups build (changed since: {', '.join(changed)}): pure Python runs"
    if os.environ.get(ENVIRONMENT, "1") == "0":
        return f"a speedups build of {len(MODULES)} modules, switched off by {ENVIRONMENT}=0"
    return f"a speedups build of {len(MODULES)} modules: the request path runs compiled"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m headway.speedups",
        description="Build, remove or report the request path compiled with mypyc.",
    )
    parser.add_argument("action", choices=("build", "clean", "status"))
    args = parser.parse_args(argv)
    root = source_root()
    if args.action == "build":
        try:
            build(root)
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from None
    elif args.action == "clean":
        for file in clean(root):
            print(f"removed {file}")
    print(status(root))


if __name__ == "__main__":
    main()
