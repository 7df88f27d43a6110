"""A small text generator made here: a GPT-2-shaped transformer trained in seconds on the
Python standard library's own docstrings, served as a generative model (docs/streams.md).

No download: the corpus is the docstrings of standard modules, read from the interpreter that
runs this (`corpus`), one character a token. The model is GPT-2's shape made small (`TinyGPT`:
token and position embeddings, pre-norm blocks of causal self-attention and an MLP, a tied
output layer), trained for a few hundred steps (`train`), enough for its output to read as
English-looking docstring text. `Generator` serves it through Headway's generative interface:
`start` reads a prompt into a sequence's key/value cache (the prefill), `step` samples each
running sequence's next character and advances all of them in one batched pass, each attending
over its own cache (Orca's selective batching), and `stop` lets a sequence's cache go.

Needs PyTorch (the `torch` extra).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import math
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The standard modules whose docstrings are the corpus (all pure Python, in every CPython).
MODULES = (
    "argparse", "ast", "asyncio", "base64", "bisect", "calendar", "collections", "configparser",
    "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "email",
    "enum", "fractions", "ftplib", "functools", "gettext", "gzip", "heapq", "hmac", "html",
    "http.client", "http.server", "imaplib", "inspect", "ipaddress", "json", "logging",
    "mailbox", "pathlib", "pdb", "pickle", "pprint", "queue", "random", "shutil", "smtplib",
    "socket", "statistics", "string", "subprocess", "tarfile", "tempfile", "textwrap",
    "threading", "tokenize", "traceback", "typing", "unittest", "urllib.parse", "uuid",
    "warnings", "wave", "weakref", "zipfile",
)  # fmt: skip
#: Token 0 ends a text (and begins one: a prompt follows it, as each docstring did); token 1
#: stands for any piece the vocabulary lacks, and is never generated.
END, UNKNOWN = 0, 1
#: The characters a corpus keeps: printable ASCII and the newline (others become spaces).
ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))
#: Tokens in all: the end, the unknown, and the corpus's most frequent pieces (a word or a
#: number with the space before it, a run of spaces, a sign), as GPT-2's pre-tokenizer cuts
#: them. Whole words, so that a model trained for seconds still writes words.
VOCABULARY = 768
_PIECES = re.compile(r" ?[A-Za-z]+| ?[0-9]+| +|[^ ]")
#: What a docstring marks up rather than says: quotes, brackets, roles (":class:`x`").
_MARKUP = re.compile(r":[a-z]+:|[`*_\[\](){}<>|\\\"#=]")


class Tokenizer:
    """Text to tokens and back: the vocabulary's pieces, found from the corpus (a small,
    fixed stand-in for GPT-2's byte-pair encoding, whole words only)."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = ["", "", *pieces]
        self.index = {piece: i for i, piece in enumerate(self.pieces) if piece}

    @classmethod
    def learn(cls, text: str, size: int = VOCABULARY) -> Tokenizer:
        """The `size` tokens for `text`: the end, the unknown, and its most frequent pieces
        (ties by the piece)."""
        counts = Counter(m.group() for m in _PIECES.finditer(text.replace("\x00", "\n")))
        frequent = sorted(counts, key=lambda p: (-counts[p], p))
        return cls(frequent[: size - 2])

    def encode(self, text: str) -> list[int]:
        tokens: list[int] = []
        for match in _PIECES.finditer(text):
            piece = match.group()
            tokens.append(END if piece == "\x00" else self.index.get(piece, UNKNOWN))
        return tokens

    def decode(self, tokens: list[int]) -> str:
        return "".join(self.pieces[t] for t in tokens)


def corpus(limit: int = 400_000) -> str:
    """The one-line summaries of MODULES' docstrings (each module's, its classes', their
    methods' and its functions'), in a fixed order, each followed by the end token's
    character (a NUL): plain sentences, markup taken out, code and tables left out. Up to
    `limit` characters.

    Read from the modules' source files, not from their objects: what a process imported
    before (torch, a test runner) replaces or adds objects in standard modules, and the
    corpus, the weights' cache key with it, must be the same in every process."""
    summaries: list[str] = []
    seen: set[str] = set()

    def add(node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        doc = ast.get_docstring(node)
        if doc is None:
            return
        line = " ".join(_MARKUP.sub("", doc.split("\n\n")[0]).split())
        letters = sum(c.isalpha() or c == " " for c in line)
        if (
            20 < len(line) < 200
            and line[0].isupper()
            and line.endswith(".")
            and letters > 0.9 * len(line)
            and line not in seen
        ):
            seen.add(line)
            summaries.append(line)

    def named(body: list[ast.stmt]) -> list[ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef]:
        kinds = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        return sorted((n for n in body if isinstance(n, kinds)), key=lambda n: n.name)

    for name in MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        add(tree)
        for member in named(tree.body):
            add(member)
            if isinstance(member, ast.ClassDef):
                for method in named(member.body):
                    add(method)
    known = set(ALPHABET)
    text = "\x00".join("".join(c if c in known else " " for c in s) for s in summaries)
    return (text + "\x00")[:limit]


@dataclass(frozen=True)
class Architecture:
    """The transformer's size: layers, attention heads, width, and the longest context."""

    layers: int = 2
    heads: int = 4
    width: int = 64
    context: int = 128
    vocabulary: int = VOCABULARY


class Memory:
    """The keys and values of every running sequence, a slot each, in two tensors of (slots,
    layers, heads, context, head width): a step reads and writes every sequence's with one
    indexed operation a layer, not one a sequence (vLLM's block table at its simplest: one
    block of the whole context per sequence). It grows by doubling when a sequence starts and
    no slot is free; a stopped sequence's slot is free again."""

    def __init__(self, shape: Architecture, slots: int = 8) -> None:
        import torch

        self.shape = shape
        width = shape.width // shape.heads
        self.keys = torch.zeros(slots, shape.layers, shape.heads, shape.context, width)
        self.values = torch.zeros_like(self.keys)
        self.free = list(range(slots - 1, -1, -1))

    def take(self, caches: list[tuple[Any, Any]]) -> int:
        """A slot holding `caches` (per layer the prompt's keys and values: (heads, length,
        head width)), from a free one or a grown memory."""
        import torch

        if not self.free:
            held = self.keys.shape[0]
            self.keys = torch.cat([self.keys, torch.zeros_like(self.keys)])
            self.values = torch.cat([self.values, torch.zeros_like(self.values)])
            self.free = list(range(2 * held - 1, held - 1, -1))
        slot = self.free.pop()
        for layer, (k, v) in enumerate(caches):
            length = k.shape[1]
            self.keys[slot, layer, :, :length] = k
            self.values[slot, layer, :, :length] = v
        return slot

    def give(self, slot: int) -> None:
        self.free.append(slot)


def model_class() -> type:
    """`TinyGPT`, defined on first use (torch is imported only then)."""
    import torch
    from torch import nn

    class TinyGPT(nn.Module):
        """GPT-2's shape, small (see the module docstring). `forward` runs a batch of token
        rows (training, prefill); `advance` one new token per sequence over their caches."""

        def __init__(self, shape: Architecture) -> None:
            super().__init__()
            self.shape = shape
            self.tokens = nn.Embedding(shape.vocabulary, shape.width)
            self.positions = nn.Embedding(shape.context, shape.width)
            self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
            self.norm = nn.LayerNorm(shape.width)
            for module in self.modules():  # GPT-2's initialisation: small weights
                if isinstance(module, nn.Linear | nn.Embedding):
                    nn.init.normal_(module.weight, std=0.02)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)

        def logits(self, x: torch.Tensor) -> torch.Tensor:
            tied: torch.Tensor = self.norm(x) @ self.tokens.weight.T  # the input's, tied
            return tied

        def forward(
            self, tokens: torch.Tensor
        ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
            """Logits of every position of `tokens` (batch, length), and each layer's keys
            and values (batch, heads, length, head width)."""
            length = tokens.shape[1]
            x = self.tokens(tokens) + self.positions(torch.arange(length))
            caches = []
            for block in self.blocks:
                x, cache = block(x)
                caches.append(cache)
            return self.logits(x), caches

        def advance(
            self, tokens: torch.Tensor, slots: list[int], lengths: list[int], memory: Memory
        ) -> torch.Tensor:
            """One new token per sequence (`tokens`: (n,)), the n sequences whose keys and
            values fill `memory`'s `slots` up to their `lengths`; each new token's keys and
            values are written after its sequence's. The next logits (n, vocabulary)."""
            rows, at = torch.tensor(slots), torch.tensor(lengths)
            x = self.tokens(tokens) + self.positions(at)
            for layer, block in enumerate(self.blocks):
                x = block.advance(x, rows, at, max(lengths) + 1, memory, layer)  # type: ignore[operator]
            return self.logits(x)

    class Block(nn.Module):
        def __init__(self, shape: Architecture) -> None:
            super().__init__()
            self.heads = shape.heads
            self.norm1 = nn.LayerNorm(shape.width)
            self.qkv = nn.Linear(shape.width, 3 * shape.width)
            self.out = nn.Linear(shape.width, shape.width)
            self.norm2 = nn.LayerNorm(shape.width)
            self.mlp = nn.Sequential(
                nn.Linear(shape.width, 4 * shape.width),
                nn.GELU(),
                nn.Linear(4 * shape.width, shape.width),
            )

        def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """Queries, keys, values of `x` (..., width) as (..., heads, head width)."""
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            shape = (*x.shape[:-1], self.heads, x.shape[-1] // self.heads)
            return q.reshape(shape), k.reshape(shape), v.reshape(shape)

        def forward(
            self, x: torch.Tensor
        ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
            q, k, v = (t.transpose(1, 2) for t in self.split(x))  # (batch, heads, len, hw)
            attended = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(attended.transpose(1, 2).reshape(x.shape))
            return x + self.mlp(self.norm2(x)), (k, v)

        def advance(
            self,
            x: torch.Tensor,
            rows: torch.Tensor,
            at: torch.Tensor,
            longest: int,
            memory: Memory,
            layer: int,
        ) -> torch.Tensor:
            """Selective batching (Orca): the layers run on the n sequences at once, and so
            does attention, each sequence over its own slot's keys up to its own length."""
            q, k, v = self.split(x)  # (n, heads, hw)
            n, heads, hw = q.shape
            memory.keys[rows, layer, :, at] = k  # each sequence's new keys after its own
            memory.values[rows, layer, :, at] = v
            keys = memory.keys[rows, layer, :, :longest]  # (n, heads, longest, hw)
            values = memory.values[rows, layer, :, :longest]
            scores = (q[:, :, None, :] @ keys.transpose(-1, -2)) / math.sqrt(hw)
            unwritten = torch.arange(longest)[None, :] > at[:, None]  # past each one's length
            scores = scores.masked_fill(unwritten[:, None, None, :], float("-inf"))
            attended = (scores.softmax(dim=-1) @ values)[:, :, 0]  # (n, heads, hw)
            x = x + self.out(attended.reshape(n, heads * hw))
            result: torch.Tensor = x + self.mlp(self.norm2(x))
            return result

    return TinyGPT


@dataclass(frozen=True)
class Training:
    """How long it trains: optimizer steps, rows per step, and tokens per row."""

    steps: int = 300
    batch: int = 16
    length: int = 32
    learning_rate: float = 6e-3
    seed: int = 0


def train(
    shape: Architecture = Architecture(),
    training: Training = Training(),
    *,
    text: str | None = None,
    tokenizer: Tokenizer | None = None,
) -> tuple[Any, Tokenizer, float]:
    """A `TinyGPT` of `shape` trained on `text` (the `corpus` by default) with `tokenizer`
    (learnt from the text by default); with the tokenizer and its final loss (the mean over
    the last tenth of the steps, nats per token)."""
    import torch

    text = corpus() if text is None else text
    tokenizer = tokenizer or Tokenizer.learn(text, shape.vocabulary)
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: more threads mostly wait on each other
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(training.seed)
            model = model_class()(shape)
            optimizer = torch.optim.AdamW(model.parameters(), lr=training.learning_rate)
            schedule = torch.optim.lr_scheduler.OneCycleLR(
                optimizer, training.learning_rate, total_steps=training.steps, pct_start=0.1
            )
            losses: list[float] = []
            for _ in range(training.steps):
                starts = torch.randint(0, len(data) - training.length - 1, (training.batch,))
                rows = torch.stack([data[s : s + training.length + 1] for s in starts])
                logits, _ = model(rows[:, :-1])
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, shape.vocabulary), rows[:, 1:].reshape(-1)
                )
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
                losses.append(float(loss.detach()))
    finally:
        torch.set_num_threads(threads)
    model.eval()
    tail = losses[-max(1, training.steps // 10) :]
    return model, tokenizer, sum(tail) / len(tail)


WEIGHTS = "weights.pt"
SHAPE = "shape.json"
TOKENS = "tokens.json"


def save(model: Any, tokenizer: Tokenizer, folder: Path) -> None:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), folder / WEIGHTS)
    (folder / SHAPE).write_text(json.dumps(asdict(model.shape)))
    (folder / TOKENS).write_text(json.dumps(tokenizer.pieces[2:]))


def load(folder: Path) -> tuple[Any, Tokenizer]:
    import torch

    model = model_class()(Architecture(**json.loads((folder / SHAPE).read_text())))
    model.load_state_dict(torch.load(folder / WEIGHTS, weights_only=True))
    return model.eval(), Tokenizer(json.loads((folder / TOKENS).read_text()))


def stops(given: Any) -> tuple[str, ...]:
    """The `stop` parameter as strings: none, one, or a list of them (empty ones ignored)."""
    if given is None:
        return ()
    if isinstance(given, str | bytes):
        given = [given]
    if not isinstance(given, list | tuple):
        raise ValueError(f"parameter 'stop' must be a string or a list of strings, got {given!r}")
    found = [g.decode() if isinstance(g, bytes) else str(g) for g in given]
    return tuple(g for g in found if g)


class Generator:
    """The served text generator: Headway's generative interface over a `TinyGPT` loaded from
    the version folder (see the module docstring). Input `text_input` (one prompt per
    request), output `text_output` (one token's text per part; an empty one ends the text).
    Parameters: `temperature` (default 0.6; 0 picks the likeliest), `top_k` (default 10),
    `seed`, `stop` (a string or a list of them: the text ends with the part that completes
    one, that part included, as OpenAI's `stop` ends a completion), and `ignore_end` (true:
    write on past the end of a sentence, up to `max_tokens`: for benchmarks that set each
    text's length)."""

    inputs = [{"name": "text_input", "datatype": "BYTES", "shape": [-1, 1]}]
    outputs = [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}]

    def load(self, path: Path) -> None:
        import torch

        torch.set_num_threads(1)  # one core per worker, for predictable steps
        self.torch = torch
        self.model, self.tokenizer = load(Path(path))
        self.context = self.model.shape.context
        self.memory = Memory(self.model.shape)

    def start(self, text_input: np.ndarray, parameters: dict[str, Any]) -> dict[str, Any]:
        """Read the prompt into a slot of the memory (the prefill); the sequence's state."""
        torch = self.torch
        prompt = text_input.reshape(-1)[0]
        if isinstance(prompt, bytes):
            prompt = prompt.decode("utf-8", "replace")
        tokens = [END, *self.tokenizer.encode(str(prompt))][-(self.context // 2) :]
        seed = parameters.get("seed")
        draws = random.Random(int(seed)) if seed is not None else random.Random()
        state = {
            "length": len(tokens),
            "temperature": float(parameters.get("temperature", 0.6)),
            "top_k": int(parameters.get("top_k", 10)),
            "ignore_end": bool(parameters.get("ignore_end", False)),
            "stop": stops(parameters.get("stop")),
            "text": "",
            "draws": draws,
        }
        with torch.inference_mode():
            logits, caches = self.model(torch.tensor([tokens]))
        state["logits"] = logits[0, -1]
        state["slot"] = self.memory.take([(k[0], v[0]) for k, v in caches])
        return state

    def step(self, states: list[dict[str, Any]]) -> tuple[dict[str, np.ndarray], list[bool]]:
        """Each sequence's next character, sampled from its logits, then one batched pass
        that appends it to every sequence's keys and values and gives the next logits."""
        torch = self.torch
        chosen = self._sample(states)
        pieces = self.tokenizer.pieces
        finished = []
        for token, state in zip(chosen, states, strict=True):
            state["text"] += pieces[token]
            stopped = any(stop in state["text"] for stop in state["stop"])
            finished.append(token == END or stopped or state["length"] + 1 >= self.context)
        going = [i for i, done in enumerate(finished) if not done]
        if going:
            slots = [states[i]["slot"] for i in going]
            lengths = [states[i]["length"] for i in going]
            with torch.inference_mode():
                logits = self.model.advance(
                    torch.tensor([chosen[i] for i in going]), slots, lengths, self.memory
                )
            for row, i in enumerate(going):
                states[i]["logits"] = logits[row]
                states[i]["length"] += 1
        texts = np.array([pieces[t].encode() for t in chosen], dtype=object)
        return {"text_output": texts}, finished

    def _sample(self, states: list[dict[str, Any]]) -> list[int]:
        """Each sequence's next token, all sampled in one batched pass: its top `top_k`
        logits at its temperature, picked by a draw from the sequence's own seeded source
        (so that a seeded text is the same whatever runs beside it), or the likeliest at a
        temperature of 0."""
        torch = self.torch
        logits = torch.stack([state["logits"] for state in states])
        logits[:, UNKNOWN] = float("-inf")
        ends = [i for i, state in enumerate(states) if state["ignore_end"]]
        if ends:
            logits[ends, END] = float("-inf")
        ks = [min(max(state["top_k"], 1), logits.shape[-1]) for state in states]
        top = torch.topk(logits, max(ks))
        k = torch.tensor(ks)
        values = top.values.masked_fill(torch.arange(max(ks))[None, :] >= k[:, None], -math.inf)
        temperatures = [state["temperature"] for state in states]
        scale = torch.tensor([t if t > 0 else 1.0 for t in temperatures])
        cumulative = (values / scale[:, None]).softmax(dim=-1).cumsum(dim=-1)
        draws = torch.tensor([state["draws"].random() for state in states])
        below = cumulative < draws[:, None] * cumulative[:, -1:]
        picks = torch.minimum(below.sum(dim=-1), k - 1).tolist()
        indices = top.indices.tolist()
        return [
            indices[row][0 if temperature <= 0 else pick]
            for row, (temperature, pick) in enumerate(zip(temperatures, picks, strict=True))
        ]

    def stop(self, state: dict[str, Any]) -> None:
        """Free the sequence's slot (once, however often it is stopped)."""
        slot = state.get("slot")
        if slot is not None:
            self.memory.give(slot)
        state.clear()


ENTRYPOINT = '''\
"""The demo's text generator: headway.textgen's Generator over the weights in this folder."""

from headway.textgen import Generator
'''


def build(
    root: Path,
    *,
    name: str = "tiny-gpt",
    shape: Architecture = Architecture(),
    training: Training = Training(),
    generation: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    cache: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write a text generator model `name` under `root` (`<name>/model.yaml`, `model.py`,
    `1/weights.pt`), training it unless `cache` (a folder) holds weights trained with the
    same shape, training and corpus; returns the model's folder."""
    import yaml

    report = progress or (lambda line: None)
    text = corpus()
    digest = hashlib.sha256(
        json.dumps([asdict(shape), asdict(training)]).encode() + text.encode()
    ).hexdigest()[:16]
    kept = None if cache is None else cache / digest
    folder = root / name
    version = folder / "1"
    if kept is not None and (kept / WEIGHTS).exists():
        model, tokenizer = load(kept)
        report(f"{name}: weights from {kept}")
    else:
        started = time.perf_counter()
        model, tokenizer, loss = train(shape, training, text=text)
        report(
            f"trained {name} on {len(text):,} characters of standard-library docstrings in "
            f"{time.perf_counter() - started:.1f}s (loss {loss:.2f} nats per token)"
        )
        if kept is not None:
            save(model, tokenizer, kept)
    save(model, tokenizer, version)
    (folder / "model.py").write_text(ENTRYPOINT)
    config: dict[str, Any] = {
        "framework": "python",
        "entrypoint": "model.py:Generator",
        "generative": generation or {"max_sequences": 8, "max_parts": 128},
        **(extra or {}),
    }
    (folder / "model.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return folder


def sample(model: Any, tokenizer: Tokenizer, prompt: str, tokens: int, seed: int = 0) -> str:
    """Up to `tokens` tokens of text after `prompt` from a `TinyGPT`, through `Generator` (a
    look at what it learnt, in this process)."""
    import torch

    generator = Generator()
    generator.torch, generator.model, generator.tokenizer = torch, model, tokenizer
    generator.context = model.shape.context
    generator.memory = Memory(model.shape, slots=1)
    state = generator.start(np.array([[prompt.encode()]], dtype=object), {"seed": seed})
    out: list[str] = []
    for _ in range(tokens):
        parts, finished = generator.step([state])
        out.append(parts["text_output"][0].decode())
        if finished[0]:
            break
    return "".join(out)


def text_of(parts: list[np.ndarray]) -> str:
    """The text of a stream's `text_output` parts (each a row of bytes, or of str)."""
    pieces = (value for part in parts for value in np.asarray(part).reshape(-1))
    return "".join(p.decode() if isinstance(p, bytes) else str(p) for p in pieces)
