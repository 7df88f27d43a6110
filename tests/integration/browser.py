"""A headless Chromium page for the tests of the server's own web pages."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
]


@contextlib.contextmanager
def chromium_page(*, failed_requests: bool = False) -> Iterator[tuple[Any, list[str]]]:
    """A Playwright page in headless Chromium, and the list the page's problems go to: console
    errors, uncaught errors and, with `failed_requests`, requests that failed. Skips the test
    when Chromium is not installed."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda error: problems.append(str(error)))
            if failed_requests:
                page.on("requestfailed", lambda request: problems.append(f"failed: {request.url}"))
            yield page, problems
        finally:
            browser.close()


def artifacts(default: Path) -> Path:
    """Where screenshots go: $HEADWAY_ARTIFACTS (CI keeps it) or the test's folder."""
    folder = Path(os.environ.get("HEADWAY_ARTIFACTS", default))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
