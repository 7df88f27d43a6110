"""The application API: `/apps/{app}/predict` and `/feedback` (Clipper's), and its admin routes.

Bodies are JSON objects; errors are `{"error": "..."}` with the status of `api.errors`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import orjson

from headway.api.errors import JSON, Response, http_status, method_not_allowed, problem
from headway.api.tracing import Tracing
from headway.apps import AppRegistry
from headway.errors import HeadwayError, InvalidInput
from headway.flows.serving import FlowApplication

_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _reply(body: Any, status: int = 200) -> Response:
    return status, orjson.dumps(body, option=_OPTS), JSON


class AppRoutes:
    """Routes `/apps/...` and `/lookups/...` to the registry.

    GET    /apps                    every application: policy, models, weights, default rate
    GET    /apps/{app}              its configuration and statistics
    PUT    /apps/{app}              create or replace it (JSON in the shape of the YAML entry)
    DELETE /apps/{app}              remove it
    POST   /apps/{app}/predict      {"input": row, "user": id?} or {"inputs": [rows], ...}
    POST   /apps/{app}/feedback     {"query_id": id, "label": y} or {"input": row, "label": y, "user": id?}
    POST   /apps/{app}/models       {"model": "name[@version]"}: link one more (at the mean weight)
    POST   /apps/{app}/active       {"model": m} or {"split": {m: share}}: fixed policy's traffic
    GET    /apps/{app}/users/{user} the weights that serve one user
    PUT    /lookups/{key}           {"value": v}: a value flows read with lookup(key)
    GET    /lookups/{key}           that value; DELETE /lookups/{key} removes it"""

    def __init__(self, registry: AppRegistry) -> None:
        self.registry = registry
        #: OpenTelemetry traces of queries (`api.tracing`); None: off.
        self.tracing: Tracing | None = None

    async def __call__(
        self,
        method: str,
        parts: list[str],
        path: str,
        raw: bytes,
        traceparent: bytes | None = None,
    ) -> Response:
        """`parts`: the path's segments after `apps`; `raw`: the request body; `traceparent`:
        the caller's W3C trace context, if it sent one."""
        routes: dict[tuple[int, str | None], tuple[str, ...]] = {
            (0, None): ("GET",),
            (1, None): ("GET", "PUT", "DELETE"),
            (2, "predict"): ("POST",),
            (2, "feedback"): ("POST",),
            (2, "models"): ("POST",),
            (2, "active"): ("POST",),
            (3, "users"): ("GET",),
        }
        key = (len(parts), parts[1] if len(parts) > 1 else None)
        allowed = routes.get(key)
        if allowed is None:
            return problem(404, f"no route {method} {path}")
        if method not in allowed:
            return method_not_allowed(method, allowed)
        if not parts:
            return _reply({"apps": self.registry.summary()})
        name = parts[0]
        if len(parts) == 1 and method == "GET":
            return _reply(self.registry.describe(name))
        if len(parts) == 1 and method == "DELETE":
            self.registry.delete(name)
            return _reply({"deleted": name})
        if key == (3, "users"):
            return _reply(self.registry.selection_app(name, "a user's weights").user_view(parts[2]))
        if method == "POST":
            self.registry.get(name)  # an unknown app is a 404 before the body is read
        body = _json(raw)
        if method == "PUT":
            app, created = self.registry.put(name, body)
            if isinstance(app, FlowApplication):
                await app.start()  # answers once its stages are served (or failed to load)
            return _reply(self.registry.describe(name), 201 if created else 200)
        action = parts[1]
        if action == "predict":
            if self.tracing is None:
                return _reply(await self._predict(name, body))
            return _reply(await self._traced_predict(name, body, traceparent))
        if action == "feedback":
            return _reply(await self._feedback(name, body))
        if action == "models":
            _fields(body, required={"model"})
            self.registry.add_model(name, body["model"])
            return _reply(self.registry.describe(name))
        _fields(body, optional={"model", "split"})
        split = body.get("split")
        if split is not None and not isinstance(split, dict):
            raise InvalidInput("'split' must map models to traffic weights")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise InvalidInput("'model' must be a model name")
        self.registry.set_traffic(name, model=model, split=split)
        return _reply(self.registry.describe(name))

    async def _traced_predict(
        self, name: str, body: dict[str, Any], traceparent: bytes | None
    ) -> dict[str, Any]:
        """`_predict` inside a server span; a flow adds its stages' spans under it, a selection
        app a span per model it called."""
        assert self.tracing is not None
        clock = self.registry.controller.clock
        trace = self.tracing.server_span(
            f"predict {name}", traceparent, clock.now(), {"headway.app": name}
        )
        status = 500
        try:
            answer = await self._predict(name, body, trace)
            status = 200
            return answer
        except HeadwayError as exc:
            status = http_status(exc)
            raise
        finally:
            trace.root.set_attribute("http.response.status_code", status)
            trace.end(clock.now(), f"HTTP {status}" if status >= 400 else None)

    async def _predict(self, name: str, body: dict[str, Any], trace: Any = None) -> dict[str, Any]:
        _fields(body, optional={"input", "inputs", "user"})
        user = _user(body)
        app = self.registry.get(name)
        if ("input" in body) == ("inputs" in body):
            raise InvalidInput("give either 'input' (one row) or 'inputs' (a list of rows)")
        if "input" in body:
            _present(body, "input")
            return await app.predict(body["input"], user, spans=trace)
        inputs = body["inputs"]
        if not isinstance(inputs, list) or not inputs:
            raise InvalidInput("'inputs' must be a non-empty list of input rows")
        if any(value is None for value in inputs):
            raise InvalidInput("'inputs' holds a null row")
        return {"outputs": await app.predict_many(inputs, user, spans=trace)}

    async def _feedback(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        _fields(body, required={"label"}, optional={"query_id", "input", "user"})
        _present(body, "label")
        query_id = body.get("query_id")
        if query_id is not None and not isinstance(query_id, str):
            raise InvalidInput("'query_id' must be a string")
        if query_id is None and body.get("input") is None:
            raise InvalidInput("feedback needs the 'query_id' of the query, or its 'input'")
        return await self.registry.feedback(
            name, body["label"], query_id=query_id, value=body.get("input"), user=_user(body)
        )


def _json(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    return body


def _fields(
    body: dict[str, Any], *, required: Collection[str] = (), optional: Collection[str] = ()
) -> None:
    missing = sorted(set(required) - set(body))
    if missing:
        raise InvalidInput(f"missing field(s) {missing}")
    known = {*required, *optional}
    unknown = sorted(set(body) - known)
    if unknown:
        raise InvalidInput(f"unknown field(s) {unknown}; expected {sorted(known)}")


def _present(body: dict[str, Any], key: str) -> None:
    if body.get(key) is None:
        raise InvalidInput(f"'{key}' must not be null")


def _user(body: dict[str, Any]) -> str | None:
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or not user):
        raise InvalidInput("'user' must be a non-empty string")
    return user


async def lookup_route(
    registry: AppRegistry, method: str, parts: list[str], raw: bytes
) -> Response:
    """`/lookups/{key}`: put, read or remove a value that flows look up."""
    if len(parts) != 1:
        return problem(404, "lookup routes are /lookups/{key}")
    key = parts[0]
    lookups = registry.lookups
    if method == "GET":
        return _reply({"key": key, "value": lookups.get(key)})
    if method == "DELETE":
        lookups.delete(key)
        return _reply({"deleted": key})
    if method != "PUT":
        return method_not_allowed(method, ("GET", "PUT", "DELETE"))
    body = _json(raw)
    _fields(body, required={"value"})
    lookups.put(key, body["value"])
    return _reply({"key": key, "value": lookups.get(key)})
