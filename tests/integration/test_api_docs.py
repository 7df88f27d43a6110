"""Interactive API docs at /docs: Swagger UI, served by the server itself from an installed
package, over the OpenAPI document the server serves at /openapi.json; in headless Chromium it
shows every operation and its "Try it out" reaches the live server."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.browser import chromium_page

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("apidocs")
    models.python_model(root / "repository", "doubler", "Doubler")
    with ServerProcess(root / "repository", state=root / "s.db") as started:
        yield started


def test_the_page_points_at_the_document_and_every_file_it_loads_is_served(
    server: ServerProcess,
) -> None:
    page = httpx.get(f"{server.url}/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '"/openapi.json"' in page.text
    loaded = re.findall(r'(?:src|href)="(/[^"]+)"', page.text)
    assert {"/docs/swagger-ui.css", "/docs/swagger-ui-bundle.js"} <= set(loaded)
    for path in loaded:
        asset = httpx.get(f"{server.url}{path}")
        assert asset.status_code == 200, path
        assert len(asset.content) > 0
    assert (
        httpx.get(f"{server.url}/docs/swagger-ui-bundle.js")
        .headers["content-type"]
        .startswith("text/javascript")
    )
    assert httpx.get(f"{server.url}/openapi.json").json()["paths"]
    # the package's other files (its own index template) are not served
    assert httpx.get(f"{server.url}/docs/index.j2").status_code == 404
    assert httpx.post(f"{server.url}/docs").status_code == 405


def test_the_page_renders_every_operation_and_tries_one_against_the_server(
    server: ServerProcess,
) -> None:
    document = httpx.get(f"{server.url}/openapi.json").json()
    operations = sum(len(methods) for methods in document["paths"].values())
    with chromium_page(failed_requests=True) as (page, problems):
        page.goto(f"{server.url}/docs")
        page.locator(".opblock").first.wait_for(timeout=15_000)
        shown = page.locator(".opblock").count()
        title = page.locator(".info .title").inner_text()
        ready = page.locator(".opblock", has=page.locator('[data-path="/v2/models/{name}/ready"]'))
        ready.locator(".opblock-summary").click()
        ready.locator("button.try-out__btn").click()
        ready.locator('input[placeholder="name"]').fill("doubler")
        ready.locator("button.execute").click()
        status = ready.locator(".live-responses-table tr.response .response-col_status").first
        status.wait_for(timeout=10_000)
        answered = status.inner_text()
    assert shown == operations
    assert answered.strip() == "200"  # the live server answered the page's request
    assert document["info"]["title"] in title
    assert problems == []
