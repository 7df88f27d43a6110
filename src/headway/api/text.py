"""Text generators as the text routes see them (OpenAI's completions, Triton's generate).

A text generator is a model with a BYTES input `text_input` (one prompt per row) and a BYTES
output `text_output` (each part: the new text of one step), Triton's generate and TensorRT-LLM
convention; options such as `max_tokens` reach it as the request's `parameters`. The routes
send one row. A model may add a BYTES output `finish_reason` to its last part ("stop",
"length"); without it, a stream that made `max_tokens` parts finished for "length", any other
for "stop".
"""

from __future__ import annotations

import codecs
from typing import Any

import numpy as np

from headway.control.request import Tensors
from headway.errors import InvalidInput, PayloadTooLarge
from headway.repository import ModelConfig

TEXT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"
FINISH_REASON = "finish_reason"

#: The largest prompt, in bytes (`--max-prompt-kb`): a prompt is text for a model's context,
#: and the longest contexts in use (a million tokens of about four bytes) fit.
MAX_PROMPT_BYTES = 4 * 2**20


def is_text_generator(config: ModelConfig) -> bool:
    inputs = {spec.name: spec.datatype for spec in config.inputs}
    outputs = {spec.name: spec.datatype for spec in config.outputs}
    return inputs.get(TEXT_INPUT) == "BYTES" and outputs.get(TEXT_OUTPUT, "BYTES") == "BYTES"


def text_generator(config: ModelConfig) -> None:
    """InvalidInput unless the model is a text generator (see the module docstring)."""
    if not is_text_generator(config):
        name = config.name
        raise InvalidInput(
            f"model {name!r} is not a text generator: a text route needs a model with a BYTES "
            f"input {TEXT_INPUT!r} and a BYTES output {TEXT_OUTPUT!r} (docs/streams.md)"
        )


def check_prompt(prompt: bytes, limit: int) -> None:
    if len(prompt) > limit:
        raise PayloadTooLarge(
            f"prompt of {len(prompt)} bytes exceeds the limit of {limit} bytes (--max-prompt-kb)"
        )


def prompt_inputs(config: ModelConfig, prompt: bytes) -> Tensors:
    """The model's inputs for one prompt: `text_input`, one row, in its declared rank."""
    shape = next(spec.shape for spec in config.inputs if spec.name == TEXT_INPUT)
    array = np.empty((1,) + (1,) * (len(shape) - 1), dtype=object)
    array.flat[0] = prompt
    return {TEXT_INPUT: array}


def max_parts(config: ModelConfig) -> int | None:
    """The most parts the model makes for one sequence, if it says."""
    generative = config.generative
    return generative.max_parts if generative is not None else None


class TextParts:
    """A stream's parts as text: each part's new text (UTF-8 decoded across parts, so a
    character split between two tokens arrives whole), the count, and why it finished."""

    __slots__ = ("count", "decoder", "finish", "max_tokens")

    def __init__(self, max_tokens: int | None) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.count = 0
        self.max_tokens = max_tokens
        self.finish: str | None = None

    def text(self, outputs: Tensors) -> str:
        """The new text of one part."""
        self.count += 1
        reason = outputs.get(FINISH_REASON)
        if reason is not None and reason.size:
            self.finish = _text(reason.flat[0])
        array = outputs.get(TEXT_OUTPUT)
        if array is None:
            return ""
        return self.decoder.decode(b"".join(_bytes(value) for value in array.flat))

    def rest(self) -> str:
        """What the decoder still holds at the end (an incomplete character, replaced)."""
        return self.decoder.decode(b"", final=True)

    @property
    def finish_reason(self) -> str:
        if self.finish is not None:
            return self.finish
        return "length" if self.max_tokens is not None and self.count >= self.max_tokens else "stop"


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return str(value).encode()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
