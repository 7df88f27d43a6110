"""Finding a flow by its spec `path/to/file.py:object`, in the server and in workers alike.

The file is imported by path as a module of its own (its folder on `sys.path` while it
imports, so it may import files beside it); `object` is a `Flow`, or a function that takes no
arguments and returns one. A flow file is code the server runs, as a model's Python entrypoint
is: only who may change applications (the admin token) may name one, and only a file inside
the model repository (or, from the `--config` file, beside that file).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from headway.errors import ConfigError
from headway.flows.flow import Flow
from headway.importing import import_file


def split_spec(
    spec: str, where: str, base: Path | None = None, within: Sequence[Path] | None = None
) -> tuple[Path, str]:
    """(the absolute file, the object's name) of `file.py:object`; a relative file is taken
    from `base` (else the working folder). With `within`, the file, its links followed, must
    lie inside one of those folders (`confined`)."""
    file_name, _, attr = spec.rpartition(":")
    if not file_name.endswith(".py") or not attr.isidentifier():
        raise ConfigError(f"{where}: flow must look like 'path/to/file.py:name', not {spec!r}")
    path = Path(file_name)
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    if within is not None:
        confined(path, within, where)
    if not path.is_file():
        raise ConfigError(f"{where}: flow file {str(path)!r} does not exist")
    return path.resolve(), attr


def confined(path: Path, folders: Sequence[Path], where: str) -> Path:
    """`path` with its links followed; ConfigError when that is in none of `folders`. A flow
    file is code the server imports, so a name that reaches it from outside (the admin API, a
    stored app) may only pick one of the files the operator put there, as a model's
    entrypoint may only be a file of its own folder (`repository.confined`)."""
    real = path.resolve()
    inside = [folder.resolve() for folder in folders]
    if not any(real.is_relative_to(folder) for folder in inside):
        names = " or ".join(str(folder) for folder in inside)
        raise ConfigError(
            f"{where}: flow file {str(path)!r} resolves to {real}, outside {names}; a flow "
            "file must lie in the model repository (as <repository>/flows/<file>.py) or, for "
            "an app of the --config file, beside that file"
        )
    return real


def load_flow(spec: str, where: str, base: Path | None = None) -> Flow:
    """Import the file and return its flow; ConfigError saying what is wrong."""
    path, attr = split_spec(spec, where, base)
    module = import_file(path, "headway_flow", path.stem, where, keep=False)
    found = getattr(module, attr, None)
    if found is None:
        raise ConfigError(f"{where}: {path} defines no {attr!r}")
    flow = found() if callable(found) and not isinstance(found, Flow) else found
    if not isinstance(flow, Flow):
        raise ConfigError(f"{where}: {spec} is a {type(flow).__name__}, not a Flow")
    flow.sink  # noqa: B018 - a flow with several sinks fails here, at deploy time
    return flow
