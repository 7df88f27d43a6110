"""The client's operations, written once: `Client` runs each `ClientCall` blocking, `AsyncClient`
as a coroutine (so there its methods return awaitables of what is documented here)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import numpy as np

from headway.client.calls import (
    ClientCall,
    EventCall,
    generate_call,
    get_call,
    infer_call,
    model_path,
    post_call,
    ready_call,
    stream_call,
)
from headway.client.credentials import Verify, bearer
from headway.client.retry import Retry


class Operations:
    """A Headway (or any Open Inference Protocol) server at `url`: the protocol's calls and
    the apps API's, over `_run`.

    `timeout`: seconds a call without its own deadline may take. `retry`: how 429s, 503s and
    refused connections are retried; `on_retry(line)` hears each retry and why. `token`: the
    server's admin token, sent with the calls that change what it serves.
    `inference_token`: the server's inference token (`--inference-token`), sent with every
    other call (without one, `token` is: the server takes its admin token everywhere).
    `verify`: which certificates an https:// URL's server may show (`client.credentials`):
    True, the public authorities; a PEM file of authorities; False, any (tests only).
    Connections are kept and reused; close the client (or use it as a context manager).
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        *,
        timeout: float = 30.0,
        retry: Retry | None = None,
        on_retry: Callable[[str], None] | None = None,
        token: str | None = None,
        inference_token: str | None = None,
        verify: Verify = True,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or Retry()
        self.on_retry = on_retry or (lambda line: None)
        self.token = token
        self.verify = verify
        #: Sent with every call (the admin calls send `token` instead, when there is one).
        self.headers = bearer(inference_token or token)

    def _run(self, call: ClientCall[Any]) -> Any:
        raise NotImplementedError

    def _stream(self, call: EventCall[Any]) -> Any:
        raise NotImplementedError

    def _auth(self) -> dict[str, str]:
        return bearer(self.token)

    # -- the Open Inference Protocol -----------------------------------------------------------
    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray] | np.ndarray,
        *,
        version: str | int | None = None,
        outputs: Sequence[str] | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        parameters: Mapping[str, Any] | None = None,
        request_id: str | None = None,
    ) -> Any:
        """Predict (an `Answer`): `inputs` by name (one array: the input `input-0`); `timeout` in seconds is
        the deadline across retries (the server rejects at once what it cannot meet)."""
        return self._run(
            infer_call(
                model,
                inputs,
                version=version,
                outputs=outputs,
                timeout=timeout,
                priority=priority,
                parameters=parameters,
                request_id=request_id,
            )
        )

    def stream(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray] | np.ndarray,
        *,
        version: str | int | None = None,
        outputs: Sequence[str] | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        parameters: Mapping[str, Any] | None = None,
        ttft: float | None = None,
        tpot: float | None = None,
    ) -> Any:
        """Predict with a model that answers in parts: an iterator (`Client`; an async one,
        `AsyncClient`) of each part as an `Answer`, as the model makes it. `ttft` and `tpot`
        (seconds) are the stream's targets, to its first part and per part after it. A
        refusal raises before the first part (429 and 503 retried, as `infer`'s); an error
        inside the stream raises when it is reached, as the class the server names (a
        `ModelError` for a model that raised, a `WorkerFailed` for a worker that died). Leaving the loop early
        closes the stream, and the server withdraws the request."""
        return self._stream(
            stream_call(
                model, inputs, version=version, outputs=outputs, timeout=timeout,
                priority=priority, parameters=parameters, ttft=ttft, tpot=tpot,
            )
        )  # fmt: skip

    def generate(self, model: str, prompt: str, **options: Any) -> Any:
        """A text generator's whole answer to `prompt`, as one string (Triton's generate
        extension). `options`: `max_tokens`, `temperature`, `seed`, `stop`, ..., and
        `timeout`, `priority`, `ttft`, `tpot` as for `stream`."""
        return self._run(generate_call(model, prompt, stream=False, **options))

    def generate_stream(self, model: str, prompt: str, **options: Any) -> Any:
        """A text generator's answer to `prompt` as an iterator of each part's new text
        (`generate`'s options; `stream`'s errors and early exit)."""
        return self._stream(generate_call(model, prompt, stream=True, **options))

    def live(self) -> Any:
        """Whether the server is live (a bool)."""
        return self._run(ready_call("/v2/health/live"))

    def ready(self, model: str | None = None, version: str | int | None = None) -> Any:
        """Whether the server (every model it serves) or one model is ready (a bool)."""
        path = "/v2/health/ready" if model is None else f"{model_path(model, version)}/ready"
        return self._run(ready_call(path))

    def metadata(self, model: str | None = None, version: str | int | None = None) -> Any:
        return self._run(get_call("/v2" if model is None else model_path(model, version)))

    def config(self, model: str, version: str | int | None = None) -> Any:
        return self._run(get_call(f"{model_path(model, version)}/config"))

    def statistics(self, model: str | None = None, version: str | int | None = None) -> Any:
        path = "/v2/models/stats" if model is None else f"{model_path(model, version)}/stats"
        return self._run(get_call(path))

    def load(self, model: str) -> Any:
        self._run(
            post_call(f"/v2/repository/models/{quote(model, safe='')}/load", None, self._auth())
        )

    def unload(self, model: str) -> Any:
        self._run(
            post_call(f"/v2/repository/models/{quote(model, safe='')}/unload", None, self._auth())
        )

    # -- the apps API ----------------------------------------------------------------------------
    def predict(self, app: str, row: Any, *, user: str | None = None) -> Any:
        """One row through application `app`: `{"query_id", "output", "confidence", ...}`."""
        body = {"input": row, **({"user": user} if user is not None else {})}
        return self._run(post_call(f"/apps/{quote(app, safe='')}/predict", body))

    def feedback(self, app: str, query_id: str, label: Any) -> Any:
        """Tell application `app` the true label of an answered query."""
        body = {"query_id": query_id, "label": label}
        return self._run(post_call(f"/apps/{quote(app, safe='')}/feedback", body, self._auth()))
