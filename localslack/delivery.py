"""Sends signed requests to the bot the way Slack does (v0 signatures, 3-second timeout, event retries)."""

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

SLACK_TIMEOUT_S = 3.0
SLACK_USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"


class Deliverer:
    """One HTTP client towards the bot's request URL, plus a log of every delivery."""

    def __init__(
        self,
        *,
        bot_url: str | None,
        signing_secret: str,
        timeout_s: float = SLACK_TIMEOUT_S,
        retry: bool = False,
        retry_delays_s: tuple[float, ...] = (0.0, 1.0, 5.0),
    ) -> None:
        self.bot_url = bot_url
        self.verifier = SignatureVerifier(signing_secret)
        self.timeout_s = timeout_s
        self.retry = retry
        self.retry_delays_s = retry_delays_s
        self.log: list[DeliveryResult] = []
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers={"User-Agent": SLACK_USER_AGENT})

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def sign(self, body: bytes | str, timestamp: int | None = None) -> dict[str, str]:
        """``X-Slack-Request-Timestamp`` and ``X-Slack-Signature`` for ``body`` (now, unless given)."""
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        signature = self.verifier.generate_signature(timestamp=stamp, body=body)
        return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature or ""}

    async def send_event(self, envelope: dict[str, Any]) -> DeliveryResult:
        body = json.dumps(envelope).encode()
        kind = f"event_callback:{envelope['event'].get('type')}"
        return await self._send(
            body,
            "application/json",
            kind=kind,
            payload=envelope,
            event_id=envelope["event_id"],
            retry=self.retry,
        )

    async def send_interaction(self, payload: dict[str, Any]) -> DeliveryResult:
        body = urlencode({"payload": json.dumps(payload)}).encode()
        return await self._send(
            body, "application/x-www-form-urlencoded", kind=payload["type"], payload=payload
        )

    async def send_command(self, fields: dict[str, str]) -> DeliveryResult:
        body = urlencode(fields).encode()
        return await self._send(
            body, "application/x-www-form-urlencoded", kind="slash_command", payload=dict(fields)
        )

    async def deliver_raw(self, body: bytes, headers: dict[str, str]) -> DeliveryResult:
        """Send exactly these bytes and headers (no signing): for forged, stale or duplicate requests."""
        answer = await self._attempt(body, dict(headers))
        result = _result("raw", None, {}, answer.attempt, answer.text, answer.content_type, [answer.attempt])
        self.log.append(result)
        return result

    async def _send(
        self,
        body: bytes,
        content_type: str,
        *,
        kind: str,
        payload: dict[str, Any],
        event_id: str | None = None,
        retry: bool = False,
    ) -> DeliveryResult:
        attempts: list[DeliveryAttempt] = []
        max_attempts = 1 + (len(self.retry_delays_s) if retry else 0)
        attempt, text, returned_type = DeliveryAttempt(), "", ""
        for number in range(max_attempts):
            if number > 0:
                await asyncio.sleep(self.retry_delays_s[number - 1])
            headers = {
                "Content-Type": content_type,
                **self.sign(body),
            }  # signed afresh: a retry is a new request
            if number > 0:
                headers["X-Slack-Retry-Num"] = str(number)
                headers["X-Slack-Retry-Reason"] = attempts[-1].error or "http_error"
            answer = await self._attempt(body, headers)
            attempt, text, returned_type = answer.attempt, answer.text, answer.content_type
            attempt.retry_num = number
            attempts.append(attempt)
            if attempt.error is None or answer.no_retry or attempt.error == "no_bot_url":
                break
        result = _result(kind, event_id, payload, attempt, text, returned_type, attempts)
        self.log.append(result)
        return result

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
