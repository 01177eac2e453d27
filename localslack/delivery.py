"""Sends requests to the bot the way Slack does (v0 signatures, 3-second timeout, event retries).

While the app holds a Socket Mode connection the same payloads go over the socket instead (unsigned), and
the ack's ``payload`` stands in for the HTTP response body.

An event whose delivery failed (no 2xx within 3 s, an error status, no connection) is sent again up to 3
times, as Slack does, with ``X-Slack-Retry-Num`` / ``X-Slack-Retry-Reason`` (over a socket:
``retry_attempt`` / ``retry_reason``); an answer with ``X-Slack-No-Retry: 1`` stops them. Like Slack, the
person who caused the event does not wait for the retries: ``send_event`` returns after the first attempt
and the retries run in the background, updating that same ``DeliveryResult`` (``retrying`` is true until
they end; ``wait_retries()`` waits for them). Interactions and slash commands are never retried.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
from slack_sdk.signature import SignatureVerifier

from localslack.models import DeliveryAttempt, DeliveryResult
from localslack.socket_mode import EnvelopeType, SocketModeServer

SLACK_TIMEOUT_S = 3.0
# Slack retries a failed event delivery 3 times: "immediately, after 1 minute, after 5 minutes". LocalSlack
# keeps the count and the headers and reads the minutes as seconds, so a test sees every retry quickly.
RETRY_DELAYS_S = (0.0, 1.0, 5.0)
SLACK_USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"
SOCKET_RETRY_REASON = "timeout"  # what Slack puts in retry_reason when a socket envelope was not acked


@dataclass
class _Outgoing:
    """One request, ready for either transport."""

    kind: str
    body: bytes
    content_type: str
    payload: dict[str, Any]
    envelope_type: EnvelopeType
    accepts_response_payload: bool


class Deliverer:
    """One HTTP client towards the bot's request URL, plus a log of every delivery."""

    def __init__(
        self,
        *,
        bot_url: str | None,
        signing_secret: str,
        timeout_s: float = SLACK_TIMEOUT_S,
        retry: bool = True,
        retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S,
        socket: SocketModeServer | None = None,
    ) -> None:
        self.bot_url = bot_url
        self.socket = socket
        self.verifier = SignatureVerifier(signing_secret)
        self.timeout_s = timeout_s
        self.retry = retry
        self.retry_delays_s = retry_delays_s
        self.log: list[DeliveryResult] = []
        self._session: aiohttp.ClientSession | None = None
        self._retries: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers={"User-Agent": SLACK_USER_AGENT})

    async def wait_retries(self, timeout_s: float | None = None) -> None:
        """Wait until every pending event retry has been sent (or has given up)."""
        while self._retries:
            await asyncio.wait_for(asyncio.gather(*list(self._retries), return_exceptions=True), timeout_s)

    async def stop(self) -> None:
        for task in list(self._retries):
            task.cancel()
        if self._retries:
            await asyncio.gather(*self._retries, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def sign(self, body: bytes | str, timestamp: int | None = None) -> dict[str, str]:
        """``X-Slack-Request-Timestamp`` and ``X-Slack-Signature`` for ``body`` (now, unless given)."""
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        signature = self.verifier.generate_signature(timestamp=stamp, body=body)
        return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature or ""}

    @property
    def over_socket(self) -> bool:
        """Deliveries go over Socket Mode while the app holds a socket (Slack then ignores the request URL)."""
        return self.socket is not None and self.socket.connected

    async def send_event(self, envelope: dict[str, Any]) -> DeliveryResult:
        return await self._send(self._event(envelope), event_id=envelope["event_id"], retry=self.retry)

    @staticmethod
    def _event(envelope: dict[str, Any]) -> _Outgoing:
        return _Outgoing(
            kind=f"event_callback:{envelope['event'].get('type')}",
            body=json.dumps(envelope).encode(),
            content_type="application/json",
            payload=envelope,
            envelope_type="events_api",
            accepts_response_payload=False,
        )

    async def redeliver(self, result: DeliveryResult, *, reason: str = "http_timeout") -> DeliveryResult:
        """Send an event delivered before once more, as Slack does when it did not see the 200 in time: the
        same body and ``event_id``, signed afresh, numbered with ``X-Slack-Retry-Num`` (the next number) and
        ``X-Slack-Retry-Reason``; it may come minutes later. The attempt is added to ``result``."""
        if not result.kind.startswith("event_callback:"):
            raise ValueError("Slack redelivers events only")
        outgoing = self._event(result.payload)
        answer = await self._try(outgoing, len(result.attempts), DeliveryAttempt(error=reason))
        result.attempts.append(answer.attempt)
        result.status, result.error, result.detail = answer.attempt.status, answer.attempt.error, answer.attempt.detail
        result.body, result.content_type = answer.text, answer.content_type
        return result

    async def send_interaction(self, payload: dict[str, Any]) -> DeliveryResult:
        outgoing = _Outgoing(
            kind=payload["type"],
            body=urlencode({"payload": json.dumps(payload)}).encode(),
            content_type="application/x-www-form-urlencoded",
            payload=payload,
            envelope_type="interactive",
            # only these interactions let the app answer in the ack (response_action, options)
            accepts_response_payload=payload["type"] in ("view_submission", "block_suggestion"),
        )
        return await self._send(outgoing)

    async def send_command(self, fields: dict[str, str]) -> DeliveryResult:
        outgoing = _Outgoing(
            kind="slash_command",
            body=urlencode(fields).encode(),
            content_type="application/x-www-form-urlencoded",
            payload=dict(fields),
            envelope_type="slash_commands",
            accepts_response_payload=True,
        )
        return await self._send(outgoing)

    async def deliver_raw(self, body: bytes, headers: dict[str, str]) -> DeliveryResult:
        """Send exactly these bytes and headers (no signing): for forged, stale or duplicate requests."""
        answer = await self._attempt(body, dict(headers))
        result = _result("raw", None, {}, answer.attempt, answer.text, answer.content_type, [answer.attempt])
        self.log.append(result)
        return result

    async def _send(
        self, outgoing: _Outgoing, *, event_id: str | None = None, retry: bool = False
    ) -> DeliveryResult:
        answer = await self._try(outgoing, 0, None)
        result = _result(
            outgoing.kind,
            event_id,
            outgoing.payload,
            answer.attempt,
            answer.text,
            answer.content_type,
            [answer.attempt],
        )
        self.log.append(result)
        if retry and self.retry_delays_s and _retryable(answer):
            result.retrying = True
            task = asyncio.ensure_future(self._retry(outgoing, result))
            self._retries.add(task)
            task.add_done_callback(self._retries.discard)
        return result

    async def _try(self, outgoing: _Outgoing, number: int, previous: DeliveryAttempt | None) -> _Answer:
        if self.over_socket:
            answer = await self._attempt_socket(outgoing, number)
        else:
            headers = {
                "Content-Type": outgoing.content_type,
                **self.sign(outgoing.body),
            }  # signed afresh: a retry is a new request
            if number > 0:
                headers["X-Slack-Retry-Num"] = str(number)
                headers["X-Slack-Retry-Reason"] = (previous.error if previous else None) or "http_error"
            answer = await self._attempt(outgoing.body, headers)
        answer.attempt.retry_num = number
        return answer

    async def _retry(self, outgoing: _Outgoing, result: DeliveryResult) -> None:
        """Slack's retries of one event: same body and event_id, re-signed, numbered 1..3."""
        try:
            for number, delay in enumerate(self.retry_delays_s, start=1):
                await asyncio.sleep(delay)
                answer = await self._try(outgoing, number, result.attempts[-1])
                result.attempts.append(answer.attempt)
                last = answer.attempt
                result.status, result.error, result.detail = last.status, last.error, last.detail
                result.body, result.content_type = answer.text, answer.content_type
                result.elapsed_s = sum(a.elapsed_s for a in result.attempts)
                if not _retryable(answer):
                    return
        finally:
            result.retrying = False

    async def _attempt_socket(self, outgoing: _Outgoing, number: int) -> _Answer:
        assert self.socket is not None
        is_event = outgoing.envelope_type == "events_api"
        reply = await self.socket.request(
            outgoing.envelope_type,
            outgoing.payload,
            accepts_response_payload=outgoing.accepts_response_payload,
            timeout_s=self.timeout_s,
            retry_attempt=number if is_event else None,
            retry_reason=(SOCKET_RETRY_REASON if number else "") if is_event else None,
        )
        if reply.ack is None:
            return _Answer(DeliveryAttempt(error=reply.error, detail=reply.detail, elapsed_s=reply.elapsed_s))
        attempt = DeliveryAttempt(status=200, elapsed_s=reply.elapsed_s)  # an ack is Socket Mode's 200
        if reply.ack.payload is None:
            return _Answer(attempt)
        return _Answer(attempt, json.dumps(reply.ack.payload), "application/json")

    async def _attempt(self, body: bytes, headers: dict[str, str]) -> _Answer:
        if not self.bot_url:
            return _Answer(DeliveryAttempt(error="no_bot_url"))
        await self.start()
        assert self._session is not None
        started = time.monotonic()
        try:
            async with self._session.post(
                self.bot_url,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                allow_redirects=False,
            ) as response:
                text = await response.text(errors="replace")
                elapsed = time.monotonic() - started
                attempt = DeliveryAttempt(status=response.status, elapsed_s=elapsed)
                if not 200 <= response.status < 300:
                    attempt.error, attempt.detail = "http_error", text[:200]
                no_retry = response.headers.get("X-Slack-No-Retry") == "1"
                return _Answer(attempt, text, response.headers.get("Content-Type", ""), no_retry)
        except TimeoutError:
            return _Answer(DeliveryAttempt(error="http_timeout", elapsed_s=time.monotonic() - started))
        except aiohttp.ClientConnectorError as exc:
            refused = isinstance(exc.os_error, ConnectionRefusedError)
            detail = "connection refused" if refused else (str(exc.os_error) or "connection failed")
            failed = DeliveryAttempt(
                error="connection_failed", detail=detail, elapsed_s=time.monotonic() - started
            )
            return _Answer(failed)
        except aiohttp.ClientError as exc:
            detail = str(exc) or type(exc).__name__
            failed = DeliveryAttempt(
                error="connection_failed", detail=detail, elapsed_s=time.monotonic() - started
            )
            return _Answer(failed)


@dataclass
class _Answer:
    attempt: DeliveryAttempt
    text: str = ""
    content_type: str = ""
    no_retry: bool = False


def _retryable(answer: _Answer) -> bool:
    return answer.attempt.error not in (None, "no_bot_url") and not answer.no_retry


def _result(
    kind: str,
    event_id: str | None,
    payload: dict[str, Any],
    last: DeliveryAttempt,
    text: str,
    content_type: str,
    attempts: list[DeliveryAttempt],
) -> DeliveryResult:
    return DeliveryResult(
        kind=kind,
        event_id=event_id,
        payload=payload,
        status=last.status,
        body=text,
        content_type=content_type,
        error=last.error,
        detail=last.detail,
        elapsed_s=sum(a.elapsed_s for a in attempts),
        attempts=attempts,
    )
