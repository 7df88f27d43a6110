"""The text generator made here (`headway.textgen`): its cached step matches a full pass, and
it streams text through the controller from a real worker, several sequences per step."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from headway import textgen  # noqa: E402
from headway.control.controller import Controller  # noqa: E402
from headway.control.request import InferenceRequest  # noqa: E402
from headway.repository import Repository  # noqa: E402
from headway.runtime.engines.local import LocalEngine  # noqa: E402
from tests.streams.receivers import Recorder  # noqa: E402

#: Small and quick: these tests check the serving, not the prose.
SHAPE = textgen.Architecture(layers=2, heads=2, width=32, context=64, vocabulary=256)
TRAINING = textgen.Training(steps=20, batch=8, length=16)


@pytest.fixture(scope="session")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of weights trained once per test session."""
    cache = tmp_path_factory.mktemp("textgen-cache")
    textgen.build(tmp_path_factory.mktemp("warm"), shape=SHAPE, training=TRAINING, cache=cache)
    return cache


def test_a_cached_step_gives_what_a_full_pass_gives(weights: Path) -> None:
    [folder] = list(weights.iterdir())
    model, tokenizer = textgen.load(folder)
    tokens = tokenizer.encode("Return the value of the given object.")
    full, _ = model(torch.tensor([tokens]))
    memory = textgen.Memory(model.shape, slots=1)
    _, caches = model(torch.tensor([tokens[:4]]))
    other = memory.take([(k[0], v[0]) for k, v in caches])  # a neighbour, in the grown part
    slot = memory.take([(k[0], v[0]) for k, v in caches])
    assert memory.keys.shape[0] == 2 and slot != other
    stepped = []
    for length, token in enumerate(tokens[4:], start=4):
        stepped.append(
            model.advance(torch.tensor([token, 0]), [slot, other], [length, 4], memory)[0]
        )
    torch.testing.assert_close(torch.stack(stepped), full[0, 4:], atol=1e-4, rtol=1e-4)


def test_a_seeded_text_is_the_same_alone_and_beside_others(weights: Path) -> None:
    [folder] = list(weights.iterdir())
    generator = textgen.Generator()
    generator.load(folder)

    def texts(prompts: list[bytes], seed: int = 7) -> list[str]:
        states = [
            generator.start(np.array([[p]], dtype=object), {"seed": seed + i, "ignore_end": True})
            for i, p in enumerate(prompts)
        ]
        written = [""] * len(states)
        for _ in range(10):
            outputs, _ = generator.step(states)
            for i, piece in enumerate(outputs["text_output"]):
                written[i] += piece.decode()
        for state in states:
            generator.stop(state)
        return written

    alone = texts([b"Return the"])
    beside = texts([b"Return the", b"The socket", b"", *[b"Create a"] * 10])
    assert beside[0] == alone[0]
    assert len(set(beside[3:])) > 1  # same prompt, other seeds: other texts
    assert sorted(generator.memory.free) == list(range(generator.memory.keys.shape[0]))


def test_a_stop_string_ends_the_text_with_the_part_that_completes_it(weights: Path) -> None:
    [folder] = list(weights.iterdir())
    generator = textgen.Generator()
    generator.load(folder)
    prompt = np.array([[b"Return the"]], dtype=object)

    def write(**parameters: object) -> list[str]:
        state = generator.start(prompt, {"temperature": 0, "ignore_end": True, **parameters})
        pieces: list[str] = []
        for _ in range(12):
            outputs, [finished] = generator.step([state])
            pieces.append(textgen.text_of([outputs["text_output"]]))
            if finished:
                break
        return pieces

    free = write()
    assert len(free) == 12
    stop = free[5]
    cut = write(stop=[stop, "never written"])
    assert cut == free[: free.index(stop) + 1]
    assert write(stop=stop) == cut  # one string will do
    with pytest.raises(ValueError, match="'stop'"):
        write(stop=3)


def test_the_generator_streams_text_several_sequences_per_step(
    weights: Path, tmp_path: Path
) -> None:
    textgen.build(
        tmp_path, shape=SHAPE, training=TRAINING, cache=weights,
        generation={"max_sequences": 4, "max_parts": 24},
    )  # fmt: skip

    async def scenario() -> None:
        controller = Controller(Repository.scan(tmp_path), LocalEngine(1), ready_timeout=60)
        await controller.start()
        try:
            for _ in range(2000):
                if not controller.warming("tiny-gpt"):
                    break
                await asyncio.sleep(0.01)
            recorders = []
            for prompt in ("Return the", "The socket", "Create a", ""):
                recorder = Recorder()
                request = InferenceRequest(
                    "tiny-gpt",
                    inputs={"text_input": np.array([[prompt.encode()]], dtype=object)},
                    stream=True,
                    ttft=30.0,
                    parameters={"max_tokens": 12, "ignore_end": True, "seed": 1},
                )
                controller.submit(request, recorder)
                recorders.append(recorder)
            await asyncio.wait_for(asyncio.gather(*(r.ended for r in recorders)), 60)
            for recorder in recorders:
                assert recorder.kinds == ["part"] * 12 + ["done"]
                text = textgen.text_of([p["text_output"] for p in recorder.parts()])
                assert text.strip() and text.isascii()
            sizes = controller.model_statistics("tiny-gpt").counts.batch_size
            assert sizes.total / sizes.count > 1  # sequences shared steps
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_the_corpus_is_the_same_in_a_fresh_process_and_in_a_busy_one() -> None:
    """The weights' cache key is the corpus's digest: a process that reads it first thing (the
    demo) and one that imported torch, a test runner and more before (a benchmark, this test)
    must find the same weights."""
    fresh = subprocess.run(
        [sys.executable, "-c", "import sys; from headway import textgen; "
         "sys.stdout.write(textgen.corpus())"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert "torch" in sys.modules
    assert fresh.stdout == textgen.corpus()


def test_a_sample_in_this_process_writes_text(weights: Path) -> None:
    [folder] = list(weights.iterdir())
    model, tokenizer = textgen.load(folder)
    text = textgen.sample(model, tokenizer, "Return the", 8, seed=3)  # may end at once
    assert text.isascii() and len(text) <= 8 * max(len(p) for p in tokenizer.pieces)
    assert textgen.sample(model, tokenizer, "Return the", 8, seed=3) == text
