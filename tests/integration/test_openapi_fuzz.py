"""Schemathesis, with all its checks, over the OpenAPI document a real server serves: no server
error, every answer as documented, every documented input accepted and every input the
document refuses refused, the right answer to undocumented methods (405 with `Allow`)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.text_models import spell

pytestmark = pytest.mark.integration

#: Examples per operation and phase: enough to reach every route's refusals, few enough to
#: keep the run to well under a minute on two busy cores.
EXAMPLES = 5

# 503 is an answer the document promises ("retry later": a deadline that cannot be met on a
# busy machine, a model not loaded yet), not a server error; a 500 is one.
# Whether an inference, a generation, a completion or an application is valid also depends
# on the models served (input names, datatypes, element counts against the shape; a text
# generator's name and its most parts; the names an app links), which no JSON Schema of the
# document can say, so there a schema-valid request may be a 400 or 404. The text routes run
# on a text generator (`spell`) named as the demo's, `tiny-gpt`, which the documented
# examples (sent by the examples phase) name.
CONFIG = """
[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", "503"]

[parameters]
"path.name" = "doubler"
"path.version" = "1"

[[operations]]
include-path-regex = "^/v2/repository/models/"
parameters = { "path.name" = "spare" }

[[operations]]
include-path-regex = "/generate(_stream)?$"
parameters = { "path.name" = "tiny-gpt" }

[[operations]]
include-path-regex = "(/infer|/generate|/generate_stream|^/apps/.*|^/v1/.*)$"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx",
]
"""


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("fuzz-repository")
    models.python_model(root, "doubler", "Doubler")
    models.python_model(root, "spare", "Doubler")  # loaded and unloaded by the run
    spell(root, max_parts=64)  # as the demo's generator, whom the documented examples name
    (root / "spell").rename(root / "tiny-gpt")
    state = tmp_path_factory.mktemp("fuzz-state") / "state.db"
    log = tmp_path_factory.mktemp("fuzz-logs") / "server.log"
    with ServerProcess(root, state=state, log=log) as srv:
        yield srv


def test_schemathesis_finds_no_server_error_and_no_mismatch(
    fuzzed: ServerProcess, tmp_path: Path
) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()",
        "--config-file", str(config), "--no-color",
        "run", f"{fuzzed.url}/openapi.json",
        "--checks", "all", "--max-examples", str(EXAMPLES), "--seed", "7",
        "--workers", "1", "--generation-database", "none", "--continue-on-failure",
        "--suppress-health-check", "all", "--request-timeout", "30",
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-20_000:]
    assert "Tested: " in report and " failures" not in report.splitlines()[-1], report[-5_000:]
