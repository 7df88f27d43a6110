"""`/metrics` exports exactly what docs/protocol.md lists, with the labels it says, and the
per-model queue and compute histograms and labelled rejections move with traffic."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from headway.launcher import ServerProcess
from tests.integration.oip_client import infer_json

pytestmark = pytest.mark.integration

DOCS = Path(__file__).parents[2] / "docs" / "protocol.md"


def _documented() -> dict[str, tuple[str, set[str]]]:
    """The docs' metrics table: exposed name -> (type, labels)."""
    section = DOCS.read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| (\w+) \|([a-z, ]*)\|", section, re.MULTILINE)
    return {
        name: (kind, {x.strip() for x in labels.split(",") if x.strip()})
        for name, kind, labels in rows
    }


def _exported(text: str) -> dict[str, tuple[str, set[str]]]:
    out = {}
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {k for sample in family.samples for k in sample.labels if k != "le"}
        out[name] = (family.type, labels)
    return out


def test_the_page_is_exactly_the_documented_table(server: ServerProcess) -> None:
    rows = np.zeros((1, 4), np.float32)
    assert infer_json(server.url, "slow", rows).status_code == 200  # its duration is known
    # 100 ms for a 200 ms model: refused at admission (a 1 ms deadline could pass while the
    # request waits to be read on a busy machine, and be refused unread as late instead)
    hopeless = infer_json(server.url, "slow", rows, parameters={"timeout": 100_000})
    assert hopeless.status_code == 503
    assert infer_json(server.url, "doubler", rows).status_code == 200
    text = httpx.get(f"{server.url}/metrics").text
    documented, exported = _documented(), _exported(text)
    assert len(documented) > 25
    assert {n: k for n, (k, _) in exported.items()} == {n: k for n, (k, _) in documented.items()}
    for name, (_, labels) in exported.items():
        if labels:  # a family with samples carries exactly the documented labels
            assert labels == documented[name][1], name
    assert re.search(
        r'^headway_rejected_at_admission_total\{model="slow",reason="deadline"\} [1-9]',
        text,
        re.MULTILINE,
    )
    assert re.search(r'^headway_errors_total\{model="slow",reason="deadline"\} [1-9]', text, re.M)
    for histogram in ("headway_queue_seconds", "headway_compute_seconds"):
        count = re.search(rf'^{histogram}_count\{{model="doubler"\}} (\S+)$', text, re.M)
        assert count and float(count.group(1)) >= 1, histogram
    assert re.search(r"^process_resident_memory_bytes [1-9]", text, re.M)
