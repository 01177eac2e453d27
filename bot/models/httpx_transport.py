"""An ``httpx.AsyncClient`` handed to ``OpenAIChatModel(client=...)``, as before the model client moved to
aiohttp: still honoured, so code that shares its own httpx client keeps working. Imported only
then; the model's own session is aiohttp's (bot.models.transport)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx

from bot.models.transport import Reply, TransportFailure


class HttpxTransport:
    def __init__(self, client: httpx.AsyncClient, timeout: float):
        self._client = client
        self._timeout = httpx.Timeout(timeout)

    async def post(self, url: str, data: bytes, headers: Mapping[str, str]) -> Reply:
        request = self._client.build_request("POST", url, content=data, headers=headers, timeout=self._timeout)
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            raise _failure(exc) from exc
        return _HttpxReply(response)

    async def aclose(self) -> None:
        await self._client.aclose()


class _HttpxReply:
    def __init__(self, response: httpx.Response):
        self._response = response
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers
        self._body: AsyncIterator[bytes] | None = None

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.TransportError as exc:
            raise _failure(exc) from exc

    async def next_bytes(self) -> bytes:
        if self._body is None:
            self._body = self._response.aiter_bytes()
        try:
            return await anext(self._body, b"")
        except httpx.TransportError as exc:
            raise _failure(exc) from exc

    async def release(self) -> None:
        await self._response.aclose()


def _failure(exc: httpx.TransportError) -> TransportFailure:
    return TransportFailure("timeout" if isinstance(exc, httpx.TimeoutException) else "connection")
