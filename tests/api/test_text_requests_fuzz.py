"""Any JSON at all to the text routes' parsers (`api.completions.parse`, `api.generate.parse`):
each is taken or refused with InvalidInput (a 400 naming the problem) or PayloadTooLarge (413),
never another exception (a 500), whatever the types and nesting of its fields."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.api import completions, generate
from headway.errors import InvalidInput, PayloadTooLarge
from headway.repository import ModelConfig, TensorSpec

MODEL = ModelConfig(
    name="gen", version=1, framework="python", path=Path("."),
    inputs=(TensorSpec("text_input", "BYTES", (-1, 1)), TensorSpec("k", "INT32", (-1,))),
)  # fmt: skip

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
COMPLETION_KEYS = sorted(completions._CHAT | completions._COMPLETION)
GENERATE_KEYS = ["text_input", "k", "parameters", "id", "max_tokens", "temperature", "stop"]


def fields(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects of the route's own keys (and some others), with values of any JSON type."""
    return st.dictionaries(st.sampled_from(keys) | st.text(max_size=6), VALUES, max_size=8)


@settings(max_examples=400, deadline=None)
@given(raw=fields(COMPLETION_KEYS), chat=st.booleans(), model=st.booleans())
def test_any_completion_is_taken_or_refused_as_bad_input(
    raw: dict[str, Any], chat: bool, model: bool
) -> None:
    if model:
        raw["model"] = "m"
    with contextlib.suppress(InvalidInput, PayloadTooLarge):
        completions.parse(orjson.dumps(raw), chat=chat, max_prompt=64)


@settings(max_examples=400, deadline=None)
@given(raw=fields(GENERATE_KEYS) | VALUES)
def test_any_generate_request_is_taken_or_refused_as_bad_input(raw: Any) -> None:
    with contextlib.suppress(InvalidInput, PayloadTooLarge):
        generate.parse(orjson.dumps(raw), MODEL, max_prompt=64)
