"""`Client`: the blocking client, over one pool of kept-alive connections."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, TypeVar

import httpx

from headway.client.calls import ClientCall, EventCall, Tries
from headway.client.credentials import tls_context
from headway.client.operations import Operations

T = TypeVar("T")


class Client(Operations):
    __doc__ = (Operations.__doc__ or "") + "\n    Blocking: each call returns its answer.\n"

    def __init__(self, url: str = "http://127.0.0.1:8000", **settings: Any) -> None:
        super().__init__(url, **settings)
        self._http = httpx.Client(
            base_url=self.url,
            timeout=self.timeout,
            headers=self.headers,
            verify=tls_context(self.verify),
        )

    # -- plumbing --------------------------------------------------------------------------------
    def _run(self, call: ClientCall[T]) -> T:
        tries = Tries(call, self.retry, self.on_retry)
        while True:
            request = tries.next_request(self.timeout)
            try:
                response = self._http.request(**request)
            except httpx.ConnectError as exc:
                time.sleep(tries.wait_after(None, exc))
                continue
            if response.status_code in call.settles:
                return call.read(response)
            time.sleep(tries.wait_after(response, None))

    def _stream(self, call: EventCall[T]) -> Iterator[T]:
        tries = Tries(call, self.retry, self.on_retry)
        while True:
            request = tries.next_request(self.timeout)
            try:
                with self._http.stream(**request) as response:
                    if response.status_code == 200:
                        for line in response.iter_lines():
                            ended, value = call.part(line)
                            if value is not None:
                                yield value
                            if ended:
                                return
                        return
                    response.read()
                    wait = tries.wait_after(response, None)
            except httpx.ConnectError as exc:
                wait = tries.wait_after(None, exc)
            time.sleep(wait)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
