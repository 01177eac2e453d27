"""The thread's status line ("Thinking…", "Running `refund_charge`…"), shown only when work is slow.

Where Slack allows it (assistant threads, and channel threads since setStatus takes ``chat:write``) it is
Slack's live status under the thread, with loading messages: one call and nothing to delete. The status
line message below is the fallback where ``assistant.threads.setStatus`` is refused.

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
from datetime import UTC, datetime

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.ports import RetryLater
from bot.session import SessionRef
from handlers.delivery.pacing import SlackPacing
from store.post_ledger import PostLedger

log = logging.getLogger(__name__)

STATUS_DELAY_S = 1.5  # how long a step runs before it gets a status line
POSTING_GRACE_S = 5.0  # how long a clear waits for a status post already under way

ClientFor = Callable[[str | None], Awaitable[AsyncWebClient]]

LIVE_STATUS = "is working on it…"  # Slack shows it after the app's name; the loading messages rotate below
LOADING_MESSAGES = 10  # setStatus takes at most ten
NO_STATUS_ANYWHERE = "*"
# setStatus refused for this conversation: its status line is a message, as before
STATUS_REFUSED_HERE = {"method_not_supported_for_channel_type", "channel_type_not_supported", "invalid_thread_ts",
                       "channel_not_found", "not_in_channel"}
# ... and for the whole app (a token without the scope, a workspace that does not know the method)
STATUS_REFUSED_EVERYWHERE = {"missing_scope", "unknown_method", "not_allowed_token_type", "not_agent_app",
                             "no_permission"}


class StatusLines:
    def __init__(self, ledger: PostLedger, client_for: ClientFor, pacing: SlackPacing,
                 delay_s: float = STATUS_DELAY_S, on_slow: Callable[[SessionRef], Awaitable[None]] | None = None):
        self.ledger = ledger
        self.on_slow = on_slow  # told first when a step turns out slow (the agent session's processing)
        self.client_for = client_for
        self.pacing = pacing
        self.delay_s = delay_s
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._posting: set[str] = set()
        self._no_status: set[str] = set()  # channels (or everywhere) where Slack refused setStatus

    def show_later(self, session: SessionRef, text: str, loading: list[str] | None = None, *,
                   since: datetime | None = None) -> None:
        """Show ``text`` if the session is still working after the delay (replacing any earlier wait):
        as Slack's live status under the thread (``loading`` rotates there) where Slack allows it, else
        as a status line message. ``since``: when the work started (the event's time), if it was
        delivered later: the delay counts from then."""
        self._forget_waiting(session.session_id)
        delay_s = self.delay_s
        if since is not None:  # clamped: another process's clock may be a little off
            delay_s = min(max(delay_s - (datetime.now(UTC) - since).total_seconds(), 0.0), delay_s)
        task = asyncio.create_task(self._show_after_delay(session, text, loading or [], delay_s))
        self._pending[session.session_id] = task
        task.add_done_callback(lambda t, sid=session.session_id: self._done(sid, t))

    def forget_pending(self, session: SessionRef) -> None:
        """A status not shown yet is not needed (the answer is streaming in: that shows the work)."""
        self._forget_waiting(session.session_id)

    async def clear(self, session: SessionRef) -> None:
        """The turn waits or ended: no status line any more (one being posted right now is removed too)."""
        sid = session.session_id
        task = self._pending.get(sid)
        if task is not None and sid in self._posting:
            with contextlib.suppress(Exception, TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), POSTING_GRACE_S)
        self._forget_waiting(sid)
        existing = await self.ledger.get(sid, "status")
        if not existing:
            return
        await self.ledger.delete(sid, "status")
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

    async def _show_after_delay(self, session: SessionRef, text: str, loading: list[str], delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        self._posting.add(session.session_id)
        try:
            if self.on_slow is not None:
                await self.on_slow(session)
            if not await self._set_status(session, loading):
                await self._show(session, text)
        except SlackApiError as exc:
            log.info("status line not shown in %s: %s", session.session_id, exc.response.get("error"))
        except RetryLater:
            log.info("status line skipped in %s: the channel is busy", session.session_id)
        except Exception:  # noqa: BLE001 - cosmetic: never let it surface
            log.exception("status line failed in %s", session.session_id)
        finally:
            self._posting.discard(session.session_id)

    async def _set_status(self, session: SessionRef, loading: list[str]) -> bool:
        """Slack's "is thinking…" under the thread (``assistant.threads.setStatus``): one call, no message
        to delete afterwards (the app's next message in the thread replaces it, and Slack drops it after
        two minutes). False where Slack refuses it here: the caller posts a status line instead."""
        channel, thread_ts = session.channel["channel_id"], session.channel.get("thread_ts")
        if not thread_ts or not loading or channel in self._no_status or NO_STATUS_ANYWHERE in self._no_status:
            return False
        client = await self.client_for(session.team_id)
        try:
            await client.assistant_threads_setStatus(channel_id=channel, thread_ts=thread_ts, status=LIVE_STATUS,
                                                     loading_messages=loading[:LOADING_MESSAGES])
        except SlackApiError as exc:
            error = exc.response.get("error")
            if error in STATUS_REFUSED_HERE:
                self._no_status.add(channel)
            elif error in STATUS_REFUSED_EVERYWHERE:
                self._no_status.add(NO_STATUS_ANYWHERE)
            else:
                raise
            log.info("no live status in %s (%s): a status line instead", channel, error)
            return False
        return True

    async def _show(self, session: SessionRef, text: str) -> None:
        client = await self.client_for(session.team_id)
        existing = await self.ledger.get(session.session_id, "status")
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
        await self.ledger.set(
            session.session_id, "status", json.dumps({"channel": resp.get("channel"), "ts": resp["ts"]})
        )
