"""Applications: model selection that learns from feedback, served under a deadline.

An application links models of the repository, a selection policy (`fixed`, `exp3`, `exp4`),
a latency SLO and a default output. `config` parses them, `application` serves one (select,
ask, combine at the deadline, learn from feedback), `registry` holds them all and keeps them in
the store. See `docs/selection.md`.
"""

from headway.apps.application import SelectionApplication, UnknownQuery
from headway.apps.config import AppConfig, ModelRef, load_config, parse_app, parse_apps
from headway.apps.records import QueryLog
from headway.apps.registry import AppNotFound, AppRegistry
from headway.apps.tensors import input_digest, model_inputs, selection_output

__all__ = [
    "AppConfig",
    "AppNotFound",
    "AppRegistry",
    "ModelRef",
    "QueryLog",
    "SelectionApplication",
    "UnknownQuery",
    "input_digest",
    "load_config",
    "model_inputs",
    "parse_app",
    "parse_apps",
    "selection_output",
]
