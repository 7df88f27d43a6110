"""Interactive API docs: `GET /docs` serves Swagger UI over the server's own `/openapi.json`.

Swagger UI's files come from the `swagger-ui-bundle` package installed with Headway, so the page
works where no CDN is reachable; the page itself is ours (it points Swagger UI at the document).
"""

from __future__ import annotations

from functools import cache

from headway.api.errors import Response, problem

#: The files the page loads, with their content types; nothing else under /docs is served.
ASSETS = {
    "swagger-ui.css": b"text/css; charset=utf-8",
    "swagger-ui-bundle.js": b"text/javascript; charset=utf-8",
    "favicon-32x32.png": b"image/png",
}

PAGE = b"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Headway API</title>
  <link rel="stylesheet" href="/docs/swagger-ui.css">
  <link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script>
    window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true});
  </script>
</body>
</html>
"""

_HTML = [(b"content-type", b"text/html; charset=utf-8")]


def route(parts: list[str]) -> Response:
    """`parts`: the path's segments after `docs`."""
    if not parts:
        return 200, PAGE, _HTML
    name = "/".join(parts)
    if name not in ASSETS:
        return problem(404, f"no API docs file {name!r}; the page is GET /docs")
    body = _asset(name)
    if body is None:
        return problem(
            404,
            "Swagger UI's files are not installed: `python -m pip install swagger-ui-bundle` "
            "(a dependency of Headway) serves them",
        )
    return 200, body, [(b"content-type", ASSETS[name])]


@cache
def _asset(name: str) -> bytes | None:
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    body: bytes = (swagger_ui_path / name).read_bytes()
    return body
