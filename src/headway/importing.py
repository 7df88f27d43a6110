"""Importing a user's Python file by path (a model's entrypoint, a flow file).

The file becomes a module of its own under a fresh name, its folder on `sys.path` while it
imports so that it may import files beside it; failures become `ConfigError`s saying where.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from pathlib import Path
from types import ModuleType

from headway.errors import ConfigError

_modules = itertools.count()


def import_file(path: Path, prefix: str, label: str, where: str, *, keep: bool) -> ModuleType:
    """Import `path` as module `{prefix}_{label}_{n}`. `keep`: leave it in `sys.modules` (so
    that what it defines can be pickled by reference); a failed import never stays there."""
    safe = re.sub(r"\W", "_", label)
    module_name = f"{prefix}_{safe}_{next(_modules)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{where}: {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.parent))
    imported = False
    try:
        spec.loader.exec_module(module)
        imported = True
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc.message}") from None
    except Exception as exc:
        raise ConfigError(f"{where}: importing {path} failed: {exc!r}") from exc
    finally:
        sys.path.remove(str(path.parent))
        if not (imported and keep):
            sys.modules.pop(module_name, None)
    return module
