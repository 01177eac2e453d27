"""The thread's status line ("Thinking…", "Running `refund_charge`…"), shown only when work is slow.

A quick step (the model answers, a card is posted, the turn waits) would otherwise cost two Slack calls
for a line nobody reads: one post and one delete around it, on top of the card and the reply. So the
line is posted only when the step is still running ``STATUS_DELAY_S`` after it started, and removed when
the turn waits or ends. Its position is kept in Redis beside the session, so any replica removes it.
Best effort throughout: a status line never holds up a card or a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.ports import RetryLater
from bot.session import SessionRef
from handlers.pacing import SlackPacing
from store.sessions import SessionStore

log = logging.getLogger(__name__)

STATUS_DELAY_S = 1.5  # how long a step runs before it gets a status line
POSTING_GRACE_S = 5.0  # how long a clear waits for a status post already under way

ClientFor = Callable[[str | None], Awaitable[AsyncWebClient]]


class StatusLines:
    def __init__(self, store: SessionStore, client_for: ClientFor, pacing: SlackPacing,
                 delay_s: float = STATUS_DELAY_S):
        self.store = store
        self.client_for = client_for
        self.pacing = pacing
        self.delay_s = delay_s
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._posting: set[str] = set()

    def show_later(self, session: SessionRef, text: str) -> None:
        """Show ``text`` if the session is still working after the delay (replacing any earlier wait)."""
        self._forget_waiting(session.session_id)
        task = asyncio.create_task(self._show_after_delay(session, text))
        self._pending[session.session_id] = task
        task.add_done_callback(lambda t, sid=session.session_id: self._done(sid, t))

    async def clear(self, session: SessionRef) -> None:
        """The turn waits or ended: no status line any more (one being posted right now is removed too)."""
        sid = session.session_id
        task = self._pending.get(sid)
        if task is not None and sid in self._posting:
            with contextlib.suppress(Exception, TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), POSTING_GRACE_S)
        self._forget_waiting(sid)
        existing = await self.store.channel_get(sid, "status")
        if not existing:
            return
        await self.store.channel_delete(sid, "status")
        status = json.loads(existing)
        client = await self.client_for(session.team_id)
        try:
            await client.chat_delete(channel=status["channel"], ts=status["ts"])
        except SlackApiError:
            pass  # already gone, or refused: a stale status line is cosmetic

    async def close(self) -> None:
        tasks = list(self._pending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _forget_waiting(self, sid: str) -> None:
        task = self._pending.get(sid)
        if task is not None and sid not in self._posting:
            task.cancel()
            self._pending.pop(sid, None)

    def _done(self, sid: str, task: asyncio.Task[None]) -> None:
        if self._pending.get(sid) is task:
            self._pending.pop(sid, None)

    async def _show_after_delay(self, session: SessionRef, text: str) -> None:
        await asyncio.sleep(self.delay_s)
        self._posting.add(session.session_id)
        try:
            await self._show(session, text)
        except SlackApiError as exc:
            log.info("status line not shown in %s: %s", session.session_id, exc.response.get("error"))
        except RetryLater:
            log.info("status line skipped in %s: the channel is busy", session.session_id)
        except Exception:  # noqa: BLE001 - cosmetic: never let it surface
            log.exception("status line failed in %s", session.session_id)
        finally:
            self._posting.discard(session.session_id)

    async def _show(self, session: SessionRef, text: str) -> None:
        client = await self.client_for(session.team_id)
        existing = await self.store.channel_get(session.session_id, "status")
        if existing:
            status = json.loads(existing)
            try:
                await self.pacing.updates.wait(session.team_id or "")
                await client.chat_update(channel=status["channel"], ts=status["ts"], text=text)
                return
            except SlackApiError:
                pass  # deleted by someone: post a new one
        await self.pacing.posts.wait(session.channel["channel_id"])
        resp = await client.chat_postMessage(
            channel=session.channel["channel_id"], thread_ts=session.channel.get("thread_ts") or None, text=text
        )
        await self.store.channel_set(
            session.session_id, "status", json.dumps({"channel": resp.get("channel"), "ts": resp["ts"]})
        )
