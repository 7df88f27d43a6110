"""`AsyncClient`: `Client` for asyncio, over one pool of kept-alive connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, TypeVar

import httpx

from headway.client.calls import ClientCall, EventCall, Tries
from headway.client.credentials import tls_context
from headway.client.operations import Operations

T = TypeVar("T")


class AsyncClient(Operations):
    __doc__ = (
        Operations.__doc__ or ""
    ) + "\n    For asyncio: each call is a coroutine; many may run at once over the pool.\n"

    def __init__(self, url: str = "http://127.0.0.1:8000", **settings: Any) -> None:
        super().__init__(url, **settings)
        self._http = httpx.AsyncClient(
            base_url=self.url,
            timeout=self.timeout,
            headers=self.headers,
            verify=tls_context(self.verify),
        )

    # -- plumbing --------------------------------------------------------------------------------
    async def _run(self, call: ClientCall[T]) -> T:
        tries = Tries(call, self.retry, self.on_retry)
        while True:
            request = tries.next_request(self.timeout)
            try:
                response = await self._http.request(**request)
            except httpx.ConnectError as exc:
                await asyncio.sleep(tries.wait_after(None, exc))
                continue
            if response.status_code in call.settles:
                return call.read(response)
            await asyncio.sleep(tries.wait_after(response, None))

    async def _stream(self, call: EventCall[T]) -> AsyncIterator[T]:
        tries = Tries(call, self.retry, self.on_retry)
        while True:
            request = tries.next_request(self.timeout)
            try:
                async with self._http.stream(**request) as response:
                    if response.status_code == 200:
                        async for line in response.aiter_lines():
                            ended, value = call.part(line)
                            if value is not None:
                                yield value
                            if ended:
                                return
                        return
                    await response.aread()
                    wait = tries.wait_after(response, None)
            except httpx.ConnectError as exc:
                wait = tries.wait_after(None, exc)
            await asyncio.sleep(wait)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()
