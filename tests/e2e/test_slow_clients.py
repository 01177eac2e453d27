"""A client that sends its request slowly, by accident or on purpose, cannot hold a connection to the bot.

Over a real socket: a request whose head (request line and headers) or body trickles in a byte at a time is
cut off within the server's bound, while other people's requests are answered all along. Slack sends each
request at once and gives up after 3 s, so nothing Slack sends comes near the bounds.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from urllib.parse import urlsplit

import httpx
import pytest

from bot.models.scripted import ScriptedModel
from handlers.routes.http import ClientLimits
from tests.e2e.test_malformed import JSON, signed

SOAK = os.environ.get("SOAK") == "1"
HEAD = b"POST /slack/events HTTP/1.1\r\nHost: bot\r\nContent-Type: application/json\r\n"
# bounds short enough for a fast test; the server's own are ClientLimits' defaults
LIMITS = ClientLimits(head_s=0.6, body_s=0.6, linger_s=0.2)
LATE_S = 1.5  # a close later than the bound by this much is no close at all (the machine may be busy)


def signed_request(challenge: str, *, close: bool = False) -> tuple[bytes, bytes]:
    """A signed ``url_verification`` request as bytes on the wire: its head and its body."""
    body = json.dumps({"type": "url_verification", "challenge": challenge, "token": "t"}).encode()
    fields = {k: v for k, v in signed(body, JSON).items() if k != "Content-Type"}
    fields["Content-Length"] = str(len(body))
    if close:
        fields["Connection"] = "close"
    return HEAD + b"".join(f"{k}: {v}\r\n".encode() for k, v in fields.items()) + b"\r\n", body


async def trickle(writer: asyncio.StreamWriter, data: bytes, every_s: float) -> None:
    """Send ``data`` a byte at a time, until it is all sent or the server closes the connection."""
    for byte in data:
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            return
        await asyncio.sleep(every_s)


async def seconds_until_closed(reader: asyncio.StreamReader, at_most_s: float) -> tuple[float, bytes]:
    """How long after now the server closes the connection (or ``at_most_s`` if it does not), and what it said."""
    started, said = time.monotonic(), b""
    try:
        async with asyncio.timeout(at_most_s):
            while chunk := await reader.read(4096):
                said += chunk
    except TimeoutError:
        return at_most_s, said
    except ConnectionError:
        pass
    return time.monotonic() - started, said


async def answered_meanwhile(url: str, until: asyncio.Task) -> int:
    """Signed requests from someone else, one after another while the slow client holds its connection."""
    body = json.dumps({"type": "url_verification", "challenge": "still-here", "token": "t"}).encode()
    count = 0
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        while not until.done():
            response = await http.post("/slack/events", content=body, headers=signed(body, JSON))
            assert response.status_code == 200 and "still-here" in response.text, response.text
            count += 1
            await asyncio.sleep(0.05)
    return count


async def slow_client(url: str, data: bytes, every_s: float, at_most_s: float, *,
                      at_once: bytes = b"") -> tuple[float, bytes, int]:
    """Open a connection, send ``at_once``, then trickle ``data``; returns how long after the connection was
    opened the server closed it, what it said and how many other requests were answered meanwhile."""
    where = urlsplit(url)
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write(at_once)
    sending = asyncio.create_task(trickle(writer, data, every_s))
    closing = asyncio.create_task(seconds_until_closed(reader, at_most_s))
    others = await answered_meanwhile(url, closing)
    _, said = await closing
    sending.cancel()
    writer.close()
    return time.monotonic() - started, said, others


@pytest.mark.soak
@pytest.mark.skipif(not SOAK, reason="waits out the server's own bounds (75 s, 10 s); make soak runs it")
@pytest.mark.parametrize("part", ["head", "body"])
async def test_at_the_servers_own_bounds_a_trickled_request_is_cut_off(local_slack, start_app, part):
    bot = await start_app(ScriptedModel([]), [])
    own = ClientLimits()
    head, body = signed_request("slow")
    at_once, slow = (b"", head + body) if part == "head" else (head, body)
    closed_after, _, others = await slow_client(bot.url, slow, 0.5, at_most_s=120, at_once=at_once)
    bound = own.head_s if part == "head" else own.body_s + own.linger_s
    assert closed_after < bound + LATE_S, f"the connection was still open after {closed_after:.1f} s"
    assert others > 0


@pytest.fixture
async def bot(local_slack, start_app):
    return await start_app(ScriptedModel([]), [], limits=LIMITS)


async def test_a_client_that_sends_its_headers_slowly_is_cut_off_while_others_are_answered(bot):
    closed_after, said, others = await slow_client(bot.url, HEAD + b"X-Slow: " + b"a" * 1000, 0.05, at_most_s=10)
    assert closed_after < LIMITS.head_s + LATE_S, f"the connection was still open after {closed_after:.1f} s"
    assert said == b"", said  # nothing to answer: the request never began
    assert others > 0


async def test_a_connection_that_sends_nothing_is_closed(bot):
    closed_after, said, _ = await slow_client(bot.url, b"", 0.05, at_most_s=10)
    assert closed_after < LIMITS.head_s + LATE_S, f"the connection was still open after {closed_after:.1f} s"


async def test_a_client_that_sends_its_body_slowly_gets_a_408_and_is_cut_off_while_others_are_answered(bot):
    head, body = signed_request("slow")
    closed_after, said, others = await slow_client(bot.url, body, 0.05, at_most_s=10, at_once=head)
    assert said.startswith(b"HTTP/1.1 408"), said[:200]
    bound = LIMITS.body_s + LIMITS.linger_s
    assert closed_after < bound + LATE_S, f"the connection was still open after {closed_after:.1f} s"
    assert others > 0


async def test_a_body_over_the_cap_is_a_413(bot):
    body = b'{"type": "url_verification", "challenge": "' + b"a" * LIMITS.max_body + b'"}'
    async with httpx.AsyncClient(base_url=bot.url, timeout=10) as http:
        response = await http.post("/slack/events", content=body, headers=signed(body, JSON))
        assert response.status_code == 413, response.status_code
        assert (await http.get("/healthz")).status_code == 200


async def test_a_request_sent_at_a_normal_pace_in_pieces_is_answered(bot):
    """Pieces well inside the bounds (a slow link, Nagle): the bounds are on the whole head and body."""
    head, body = signed_request("in-pieces", close=True)
    request = head + body
    where = urlsplit(bot.url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    piece = len(request) // 4 + 1
    for start in range(0, len(request), piece):
        writer.write(request[start : start + piece])
        await writer.drain()
        await asyncio.sleep(LIMITS.head_s / 10)
    _, said = await seconds_until_closed(reader, 10)
    writer.close()
    assert said.startswith(b"HTTP/1.1 200") and b"in-pieces" in said, said[:300]
