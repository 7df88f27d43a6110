"""The records stay usable: today's figures where a reader looks first, none where they go stale.

Each `bench/RESULTS*.md` opens with a headline table that names the date, the machine and the
command behind each row, and says where its history is (git); the commands it names exist,
with their options; a pointer to one of its sections (in `docs/`, `src/` or `bench/`) names a
section that is there. Comments, docstrings and help texts in `src/` hold no measured figures:
they say what a thing is for and point to the bench file that holds the figure.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SRC = ROOT / "src" / "headway"
RESULTS = sorted(BENCH.glob("RESULTS*.md"))

#: The headline table starts within this many lines of the top of a results file.
HEADLINE_WITHIN = 40
#: A reproduction command: a bench script or the `headway` CLI, in backticks.
COMMAND = re.compile(r"`(?:[A-Z_]+=\S+ )*(?:python (?:-m \S+|bench/\S+\.py)|headway \w+)[^`]*`")
#: A command that runs a bench script: its path, and the options given after it.
SCRIPT = re.compile(r"\bpython (bench/[\w/.-]+\.py)((?: [^`\n]*)?)")
#: `headway bench ...` (the load generator's CLI) and its options.
HEADWAY_BENCH = re.compile(r"\bheadway bench((?: [^`\n]*)?)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
#: A pointer to a section of a results file: the file, then the section's title in quotes.
POINTER = re.compile(r'bench/(RESULTS[\w-]*\.md)`?\s*(?:,\s*|\(\s*)"([^"]+)"')

#: What a measured figure looks like in prose: a rate, microseconds, "N% of the frontend's
#: time", a speed-up. Narrow on purpose: units of constants (`timeout_ms`, "5 ms", "# seconds")
#: and limits ("at most 200 bytes") are not figures that go stale.
MEASURED = re.compile(
    r"\d[\d,.]*\s?(?:req/s|requests/s|rows/s|queries/s|calls/s)\b"
    r"|\d[\d,.]*\s?(?:requests|rows|queries|answers|calls) a second\b"
    r"|\d[\d,.]*\s?(?:µs|us)\b"
    r"|\d+(?:\.\d+)?\s?[x\u00d7] (?:faster|slower|cheaper|dearer|more|fewer|less|the)\b"
    r"|\d+(?:\.\d+)?\s?% of (?:(?:the|its) )?(?:frontend|time|samples|CPU|core|capacity)"
    r"|~\s?\d[\d,.]*\s?(?:ms|s|µs|us|%)(?![\w/])"
    r"|\bmeasured (?:on|at|in)\b[^.;]*\d"
)


def _headline(text: str) -> str:
    """The section from `## Headline` to the next `## ` heading."""
    match = re.search(r"^## Headline\n.*?(?=^## |\Z)", text, re.M | re.S)
    assert match, "no `## Headline` section"
    return match.group(0)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_a_results_file_opens_with_todays_headline_table(path: Path) -> None:
    text = path.read_text()
    lines = text.splitlines()
    sections = [i for i, line in enumerate(lines) if line.startswith("## ")]
    assert sections and lines[sections[0]] == "## Headline", "the first section is the headline"
    table = next(i for i in range(sections[0], len(lines)) if lines[i].startswith("|"))
    assert table < HEADLINE_WITHIN, f"its table starts on line {table + 1}"
    headline = _headline(text)
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", headline), "no date"
    assert "**Machine**" in headline, "no machine"
    assert COMMAND.search(headline), "no command"
    assert f"git log -p bench/{path.name}" in headline, "does not say where its history is"


def _takes(code: str, option: str) -> bool:
    """Whether a script's or a CLI's source declares `option` (argparse or click), a `--no-X`
    also as argparse's `BooleanOptionalAction` of `--X`."""
    if re.search(rf"[\"'/]{re.escape(option)}[\"'/]", code):
        return True
    negated = option.removeprefix("--no-")
    return negated != option and f'"--{negated}"' in code and "BooleanOptionalAction" in code


def _commands(text: str) -> Iterator[str]:
    """Every command in backticks, and every line of a fenced code block."""
    yield from re.findall(r"`([^`\n]+)`", text)
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S):
        yield from block.splitlines()


@pytest.mark.parametrize("path", [*RESULTS, BENCH / "README.md"], ids=lambda p: p.name)
def test_the_commands_a_results_file_names_exist_with_their_options(path: Path) -> None:
    bench_cli = (SRC / "cli" / "bench.py").read_text()
    for command in _commands(path.read_text()):
        for script, args in SCRIPT.findall(command):
            source = ROOT / script
            assert source.is_file(), f"{command!r}: no {script}"
            code = source.read_text()
            for option in OPTION.findall(args):
                assert _takes(code, option), f"{command!r}: {script} has no {option}"
        for args in HEADWAY_BENCH.findall(command):
            for option in OPTION.findall(args):
                assert _takes(bench_cli, option), f"{command!r}: headway bench has no {option}"


def _headings(path: Path) -> list[str]:
    return [
        " ".join(line.lstrip("#").replace("`", "").split()).lower()
        for line in path.read_text().splitlines()
        if line.startswith("#")
    ]


def _pointing_files() -> Iterator[Path]:
    yield from sorted((ROOT / "docs").rglob("*.md"))
    yield from sorted(SRC.rglob("*.py"))
    # not bench/.work or .venvs: the trees a side-by-side run checks out there, and the peers'
    skipped = {".work", ".venvs"}
    yield from sorted(
        p for p in BENCH.rglob("*.md") if not skipped & set(p.relative_to(BENCH).parts)
    )
    yield ROOT / "README.md"


def test_a_pointer_to_a_results_section_names_a_section_that_is_there() -> None:
    broken = []
    for path in _pointing_files():
        text = re.sub(r"\s*\n\s*(?:#:?\s*)?", " ", path.read_text())  # comments joined too
        for name, section in POINTER.findall(text):
            wanted = " ".join(section.replace("`", "").split()).lower()
            target = BENCH / name
            if not target.is_file() or not any(wanted in h for h in _headings(target)):
                broken.append(f"{path.relative_to(ROOT)}: {name}, {section!r}")
    assert not broken, "\n".join(broken)


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """Comments, docstrings and help texts of a module, with their line numbers."""
    text = path.read_text()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for statement in body:  # docstrings, and the strings that document attributes
                value = statement.value if isinstance(statement, ast.Expr) else None
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    yield statement.lineno, value.value
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg in ("help", "description", "epilog"):
                    for part in ast.walk(keyword.value):
                        if isinstance(part, ast.Constant) and isinstance(part.value, str):
                            yield part.lineno, part.value


def test_no_comment_docstring_or_help_text_in_src_holds_a_measured_figure() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        for line, prose in _prose(path):
            for match in MEASURED.finditer(" ".join(prose.split())):
                found.append(f"src/headway/{name}:{line}: {match.group(0)!r}")
    assert not found, "measured figures belong in bench/RESULTS*.md:\n" + "\n".join(found)


def test_the_architecture_page_holds_no_measured_figure() -> None:
    """`docs/architecture.md` says why; how much is in the bench files, where it is dated."""
    text = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    found = [match.group(0) for match in MEASURED.finditer(text)]
    assert not found, "measured figures belong in bench/RESULTS*.md: " + ", ".join(found)


@pytest.mark.parametrize(
    "prose",
    [
        "enough to show as ~12% of the frontend's time in a profile at 11,000 req/s open loop.",
        "np.stack costs a lone row's batch ~2 us more",
        "measured on real workers, ~2 ms over an estimate",
        "the compiled path serves 1.3x more at 32 connections",
        "in five runs it reached 14-94% of capacity",
    ],
)
def test_the_pattern_finds_a_measured_figure(prose: str) -> None:
    assert MEASURED.search(prose)


@pytest.mark.parametrize(
    "prose",
    [
        "#: Seconds from a request's first byte until its whole head must have arrived.",
        "timeout_ms: 5 ms by default",
        "a hello is ~200 bytes",
        "one predicted over 2 ms runs in a thread",
        "stretched by this factor (2x + 2 ms)",
        "Python's default is 5 ms",
    ],
)
def test_the_pattern_leaves_constants_and_limits_alone(prose: str) -> None:
    assert not MEASURED.search(prose)
