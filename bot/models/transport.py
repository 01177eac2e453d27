"""The HTTP exchange under ``OpenAIChatModel``: one POST, its status, headers and body, over aiohttp.

Only the transport's own operations (connecting, reading) are translated into ``TransportFailure``;
whatever the caller does between them (an ``on_text`` callback that itself speaks HTTP, say) keeps its
own exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp


class TransportFailure(Exception):
    """Connecting or reading failed; the transport's own exception is the ``__cause__``."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind  # "timeout" | "connection"


class Reply(Protocol):
    """A response whose head has arrived; its body is read with ``read`` or ``next_bytes``."""

    status: int
    headers: Mapping[str, str]  # names in any case

    async def read(self) -> bytes: ...

    async def next_bytes(self) -> bytes:
        """What has arrived of the body since the last call (waiting for some); ``b""`` once it has ended."""
        ...

    async def release(self) -> None:
        """Hand the connection back (closed if the body was not read to its end)."""
        ...


class Transport(Protocol):
    async def post(self, url: str, data: bytes, headers: Mapping[str, str]) -> Reply: ...

    async def aclose(self) -> None: ...


class AiohttpTransport:
    """POSTs through one ``aiohttp.ClientSession``.

    ``timeout`` bounds connecting (a free connection from the pool included) and each wait for bytes,
    as httpx's single-number timeout did: a long answer is fine while it keeps flowing.
    """

    def __init__(self, session: aiohttp.ClientSession, timeout: float, *, proxy: str | None):
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        self._proxy = proxy

    @classmethod
    def opened(cls, timeout: float, url: str) -> AiohttpTransport:
        """A transport with a session of its own; call in the running loop the session will serve."""
        # not trust_env: that reads the environment and ~/.netrc again on every request, in a thread
        return cls(aiohttp.ClientSession(), timeout, proxy=_proxy_from_environment(url))

    async def post(self, url: str, data: bytes, headers: Mapping[str, str]) -> Reply:
        try:
            response = await self._session.post(
                url, data=data, headers=headers, timeout=self._timeout, proxy=self._proxy,
                allow_redirects=False,  # a redirect is an answer that is not a completion, as with httpx
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _failure(exc) from exc
        return _AiohttpReply(response)

    async def aclose(self) -> None:
        await self._session.close()


class _AiohttpReply:
    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse):
        self._response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _failure(exc) from exc

    async def next_bytes(self) -> bytes:
        try:
            return await self._response.content.readany()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _failure(exc) from exc

    async def release(self) -> None:
        self._response.release()


def _failure(exc: BaseException) -> TransportFailure:
    # aiohttp's read timeouts are ClientConnectionErrors too: the timeout is the truer name
    return TransportFailure("timeout" if isinstance(exc, TimeoutError) else "connection")


def _proxy_from_environment(url: str) -> str | None:
    """The proxy HTTP_PROXY / HTTPS_PROXY / ALL_PROXY name for ``url``, unless NO_PROXY exempts its host
    (httpx, the earlier client, honoured them; so does slack_sdk)."""
    parts = urlsplit(url)
    proxies = getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or (parts.hostname and proxy_bypass(parts.hostname)):
        return None
    return proxy
