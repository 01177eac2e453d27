"""The Slack frontend of the engine: renders each event of a session into its thread.

It implements ``bot.ports.Channel``. Card positions (channel + ts of the message that holds a
request's card) are kept in Redis beside the session, so any replica can update a card later.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable
from typing import Any, Protocol

from slack_sdk.errors import SlackApiError

from blocks.answers import answer_messages
from blocks.cards import render_requests, render_waiting, settled_card
from blocks.ephemeral import refused_text
from blocks.grants import standing_note
from blocks.status import failure_message, loading_messages, status_text
from bot.ports import RetryLater, Undeliverable
from bot.protocol import (
    ActionStarted,
    ApprovalCandidate,
    Event,
    InputEscalated,
    InputRequest,
    InputRequested,
    InputResolved,
    InputRespondersChanged,
    MessageCompleted,
    TurnFailed,
)
from bot.session import SessionRef
from handlers.delivery.marks import CLAIMED, TRANSIENT_ERRORS, event_time, find_post, post_mark
from handlers.delivery.pacing import SlackPacing, retry_after
from handlers.delivery.private_notes import tell_privately
from handlers.delivery.sessions import (
    TITLE_FIELD,
    AgentSessions,
    SessionStatus,
    title_of,
    waiting_on,
    waiting_title,
)
from handlers.delivery.status import STATUS_DELAY_S, StatusLines
from handlers.delivery.streams import STREAM_AFTER_S, LiveAnswers, StreamPacing, answer_field
from handlers.delivery.tasks import TaskStreams
from handlers.shared.deps import ClientFor
from store.outbox import RedisOutbox

log = logging.getLogger(__name__)

# longer than one chat.postMessage can take: the delivery client's timeout (bot/app.py) plus its retries
# of connection errors, which are immediate
CLAIM_IN_FLIGHT_S = 12.0
NOTE_FRESH_S = 60.0  # a private note this late would only confuse: it is dropped


class SessionStates(Protocol):
    """Where a session's saved state is read (``store.turns.RedisTurns``): for the title of a session older
    than its frontend data's title."""

    async def state(self, session_id: str) -> dict[str, Any] | None: ...


def card_field(request_id: str) -> str:
    """The session's frontend-data field that says where a request's card is (``{"channel", "ts"}``): written
    when the card is posted, read to update it, to copy it into approvers' DMs and to link it from App Home."""
    return f"card:{request_id}"


class PostInFlight(RetryLater):
    """Another worker claimed this post moments ago: look again when its post would have ended, rather
    than post it twice (a wait, not a failure)."""


def _claim() -> str:
    return f"{CLAIMED}:{time.time():.3f}"


def _claimed_at(value: str | None) -> float:
    try:
        return float((value or "").split(":", 1)[1])
    except (IndexError, ValueError):
        return 0.0  # an old-style claim: treat it as stale


# Slack's answers that mean "try again later" (TRANSIENT_ERRORS: the outbox retries with backoff), and those that mean the conversation or the app is gone for good
GONE_ERRORS = {"channel_not_found", "is_archived", "not_in_channel", "account_inactive", "token_revoked",
               "invalid_auth", "team_access_not_granted", "missing_scope", "no_permission"}
# what a sub-agent's session (bot.agents) shows in its parent's thread: its requests, not its text or status
CHILD_SHOWN = {"approval.candidate", "input.resolved", "input.escalated", "input.responders"}


class SlackChannel:
    """Events in, Slack messages out: a consumer of the outbox (``bot.engine.outbox``).

    Every post is claimed in Redis before it is sent and recorded after, so an event delivered
    again (after a crash, a 5xx or a lost answer) never posts twice: a claim without a record is
    looked up in the thread (by the message's metadata) before anything is re-posted. Transient
    failures raise (retried later); a channel that is gone raises ``Undeliverable``; other
    rejections are logged and skipped.
    """

    def __init__(self, store: RedisOutbox, client_for: ClientFor, pacing: SlackPacing | None = None, *,
                 states: SessionStates, delay_scale: float = 1.0):
        """``store``: the outbox's (the pass's requests, the post ledger); ``states``: the turns'.
        ``delay_scale``: how long a step runs before its progress shows (a status line, a stream, its tasks),
        times this (BOT_DELAY_SCALE)."""
        self.store = store
        self.states = states
        self.ledger = store.posts  # where the session's posts are
        self.client_for = client_for
        self.pacing = pacing or SlackPacing()
        self.sessions = AgentSessions(store, client_for, delay_s=STATUS_DELAY_S * delay_scale)
        self.status = StatusLines(store.posts, client_for, self.pacing, delay_s=STATUS_DELAY_S * delay_scale,
                                  on_slow=self._slow_step)  # the thread as a Slack agent session, where Slack has them
        # bot.ports.LiveText: answers streamed as they are written (a stream makes a pending status moot)
        # the turn's tool calls as tasks of its streamed answer, fed by deliver()
        stream_pacing = StreamPacing(self.pacing.mode)
        self.tasks = TaskStreams(store.posts, client_for, names=self.sessions.handles, delay_s=STATUS_DELAY_S * delay_scale,
                                 starts=stream_pacing.starts,
                                 appends=stream_pacing.appends, on_stream=self.status.forget_pending)
        self.live = LiveAnswers(store.posts, client_for, stream_after_s=STREAM_AFTER_S * delay_scale,
                                on_stream=self.status.forget_pending, posts=self.pacing.posts,
                                updates=self.pacing.updates, pacing=stream_pacing, tasks=self.tasks)

    async def close(self) -> None:
        await self.status.close()
        await self.sessions.close()
        await self.live.close()
        await self.tasks.close()

    async def deliver(self, event: Event, session: SessionRef) -> None:
        if (landing := await self.start_delivery(event, session)) is not None:
            await landing

    async def start_delivery(self, event: Event, session: SessionRef) -> Awaitable[None] | None:
        """``bot.ports.LandingChannel``: the event shown in order, except a settled card's edit, returned still
        landing: nothing after it waits on it (the answer, the next cards and the status are other messages),
        so the answer is posted beside it instead of one Slack round trip later."""
        if not session.channel.get("channel_id"):
            return None  # not a Slack session (console, benchmarks)
        edits: Awaitable[Any] | None = None
        try:
            await self.tasks.see(event, session)  # before it is shown: a task's state follows every event
            if isinstance(event, InputRequested):
                await self._post_cards(event, session)
                # a sub-agent's cards show in its parent's thread, whose session waits
                if not session.parent and self.sessions.available(session):
                    self.sessions.waits_on(session, [r.request_id for r in event.requests])
                    if await self.sessions.current(session) == "processing":  # it showed the agent working
                        await self._suspend(session, event.requests)
                    else:  # a card answered within the delay costs no session call
                        self.sessions.suspend_later(session, lambda: self._suspend(session, event.requests,
                                                                                   unless_answered=True))
            elif isinstance(event, InputResolved):  # (shown in a sub-agent's session too: CHILD_SHOWN)
                edits = await self._resolved(event, session)
            else:
                await self._render(event, session)
        except (SlackApiError, LookupError) as exc:
            await self._failed(exc, event, session)
        return asyncio.ensure_future(self._landing(edits, event, session)) if edits is not None else None

    async def _landing(self, edits: Awaitable[Any], event: Event, session: SessionRef) -> None:
        try:
            await edits
        except (SlackApiError, LookupError) as exc:
            await self._failed(exc, event, session)

    async def _failed(self, exc: SlackApiError | LookupError, event: Event, session: SessionRef) -> None:
        """What Slack's "no" means for the outbox: raised (wait, retry, or never: ``Undeliverable``), else
        logged and the event skipped."""
        if isinstance(exc, LookupError):  # no installation for the workspace any more
            raise Undeliverable(str(exc)) from exc
        error = exc.response.get("error")
        if exc.response.status_code == 429 or error == "ratelimited":
            raise RetryLater(retry_after(exc), f"Slack rate limited {event.type}") from exc
        if exc.response.status_code >= 500 or error in TRANSIENT_ERRORS:
            raise exc
        if error in GONE_ERRORS:
            if isinstance(event, InputRequested):  # the request stays open: App Home offers it instead
                for req in event.requests:
                    await self.store.mark_undeliverable(req.request_id, f"Slack said {error}")
            raise Undeliverable(f"Slack said {error}") from exc
        log.warning("Slack rejected %s for %s: %s", event.type, session.session_id, error)

    async def _render(self, event: Event, session: SessionRef) -> None:
        if session.parent and event.type not in CHILD_SHOWN:
            return  # a sub-agent's session: its cards show in the thread; its words reach people through the parent
        match event.type:
            case "turn.started":  # delivered up to 0.5 s (× BOT_DELAY_SCALE) late: the wait counts from its time
                # (the session shows processing only once the step is slow: _slow_step)
                self.status.show_later(session, status_text("thinking"), loading_messages("thinking"), since=event.at)
            case "action.started":
                assert isinstance(event, ActionStarted)
                self.status.show_later(session, status_text("running_tool", event.tool_name),
                                       loading_messages("running_tool", event.tool_name))
                if event.standing is not None:  # it skipped its card: say whose approval let it, once
                    await self._post_once(session, f"standing:{event.turn_id}:{event.call_id}",
                                          standing_note(event.standing), at=event_time(event))
            case "message.completed":
                assert isinstance(event, MessageCompleted)
                later = await self.live.finish(session, event)  # a streamed answer ends in its stream
                if later is None:
                    await self._post_reply(session, event)
                for i, message in enumerate(later or [], start=1):
                    await self._post_once(session, answer_field(event.seq, i), message, at=event_time(event))
            case "approval.candidate":
                assert isinstance(event, ApprovalCandidate)
                await self._candidate(event, session)
            case "input.escalated":
                assert isinstance(event, InputEscalated)
                await self._escalated(event, session)
            case "input.responders":  # an approver list changed: the card names who may answer now
                assert isinstance(event, InputRespondersChanged)
                await self._escalated(event, session)
            case "turn.waiting" | "turn.completed" | "turn.cancelled":
                await self.status.clear(session)
                if event.type == "turn.completed":
                    await self._session_status(session, "active")
                if event.type == "turn.cancelled":
                    await self._session_status(session, "closed")
                    await self._post_once(session, f"post:{event.seq}:0",
                                          {"text": ":octagonal_sign: Stopped. Nothing else from this turn will run."},
                                          at=event_time(event))
            case "turn.failed":
                assert isinstance(event, TurnFailed)
                await self.status.clear(session)
                await self._post_once(session, f"post:{event.seq}:0", failure_message(event.reason), at=event_time(event))
                await self._session_status(session, "active")  # it answered, with the failure: people may go on
            case _:
                pass

    async def _session_status(self, session: SessionRef, status: SessionStatus) -> None:
        """Set the thread's session status. Created now, it is titled with the thread's first request; leaving
        ``suspended``, its title (whom it waited on) is given back."""
        if status != "processing":
            await self.sessions.ended(session)
        if not self.sessions.available(session):
            return
        current = await self.sessions.current(session)
        if current == status:
            return
        if current is None:
            await self.sessions.set(session, status, await self._first_request(session))
            return
        if current == "suspended" and (first := await self._first_request(session)):
            await self.sessions.rename(session, first)
        await self.sessions.set(session, status)

    async def _suspend(self, session: SessionRef, requests: list[InputRequest], *,
                       unless_answered: bool = False) -> None:
        """The turn waits on people: ``suspended``, the title saying on whom (setStatus titles only a session it
        creates: an existing one is renamed). ``unless_answered``: set late, so not if all were answered."""
        if unless_answered and not await self.sessions.still_waiting(session):
            return
        current = await self.sessions.current(session)
        if current == "suspended":
            return
        title = waiting_title(requests, await self.sessions.handles(session, waiting_on(requests)))
        if current is None:
            await self.sessions.set(session, "suspended", title)
        elif await self.sessions.set(session, "suspended"):
            await self.sessions.rename(session, title)

    async def _slow_step(self, session: SessionRef) -> None:
        """A step still running after the status delay: the session shows ``processing`` (Slack's stop button
        with it), created now if it was not shown yet; an approved call at work moves it back from
        ``suspended``. Only then: a quick step pays no call for it. Not while the turn waits on people."""
        if self.sessions.available(session) and not await self.sessions.still_waiting(session):
            await self._session_status(session, "processing")

    async def _first_request(self, session: SessionRef) -> str | None:
        """The session's title: its first request's, carried by its frontend data (``handlers.events``)."""
        if title := session.channel.get(TITLE_FIELD):
            return title
        # a session begun before its data carried it (or not by a person's message): read it from the state
        raw = await self.states.state(session.session_id) or {}
        for message in raw.get("history") or []:
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                return title_of(message["content"]) or None
        return None

    # --- cards ---------------------------------------------------------------------------------

    async def _post_cards(self, event: InputRequested, session: SessionRef) -> None:
        # one card per message, so updating one card never touches another
        for req in event.requests:
            for message in render_requests([req]):
                await self._post_once(session, card_field(req.request_id), message, request_id=req.request_id,
                                      at=event_time(event))

    async def _post_once(
        self, session: SessionRef, field: str, message: dict[str, Any], *, request_id: str | None = None,
        at: int | None = None,
    ) -> dict[str, str] | None:
        """Post a message unless this post was made before; returns where it is. ``at``: the time of the event
        it shows (``marks.event_time``), which tells it from the posts of the session's other lives."""
        sid, channel = session.session_id, session.channel["channel_id"]
        await self.pacing.posts.wait(channel)  # before the claim: no claim is held while we wait our turn
        if self.ledger.pass_is_careful(sid) and await self.ledger.get(sid, field) is None:
            # the last deliverer died mid-pass, and claimed its posts in memory: look before posting
            found = await self._find_post(session, field, request_id, at)
            if found is not None:
                await self.ledger.set(sid, field, json.dumps(found), in_pass=True)
                return found
        if not await self.ledger.claim(sid, field, _claim(), in_pass=True):
            existing = await self.ledger.get(sid, field)
            if existing and not existing.startswith(CLAIMED):
                return json.loads(existing)  # posted and recorded already
            # claimed but not recorded: the worker died mid-post, its answer was lost, or (rarely, as
            # posts are made under the outbox lock) it is still posting. Look in the thread first.
            found = await self._find_post(session, field, request_id, at)
            if found is not None:
                await self.ledger.set(sid, field, json.dumps(found))
                return found
            in_flight_for = CLAIM_IN_FLIGHT_S - (time.time() - _claimed_at(existing))
            if in_flight_for > 0:  # the outbox looks again once a live post would have ended
                raise PostInFlight(max(in_flight_for, 0.5), f"{field} is being posted by another worker")
            await self.ledger.set(sid, field, _claim())
        client = await self.client_for(session.team_id)
        try:
            resp = await client.chat_postMessage(
                channel=channel, thread_ts=session.channel.get("thread_ts") or None, text=message["text"],
                blocks=message.get("blocks"), metadata=post_mark(field, at),
            )
        except SlackApiError:
            # Slack answered "no": nothing was posted, so the next attempt may post at once. (A network
            # error keeps the claim: the post may have landed, and is looked up before posting again.)
            await self.ledger.delete(sid, field)
            raise
        posted = {"channel": resp.get("channel", channel), "ts": resp["ts"]}
        await self.ledger.set(sid, field, json.dumps(posted), in_pass=True)
        return posted

    async def _find_post(self, session: SessionRef, field: str, request_id: str | None,
                         at: int | None = None) -> dict[str, str] | None:
        client = await self.client_for(session.team_id)
        return await find_post(client, session.channel["channel_id"], session.channel.get("thread_ts"), field,
                               at=at, request_id=request_id)

    async def _card(self, session: SessionRef, request_id: str) -> dict[str, Any] | None:
        field = card_field(request_id)
        raw = await self.ledger.get(session.session_id, field)
        if not raw:
            return None
        if not raw.startswith(CLAIMED):
            return json.loads(raw)
        # a worker died between posting the card and recording where it is: find it in the thread
        found = await self._find_post(session, field, request_id)
        if found is not None:
            await self.ledger.set(session.session_id, field, json.dumps(found))
        return found

    async def _refusal_note(self, event: ApprovalCandidate, session: SessionRef, user: str) -> None:
        """Tell a refused clicker why, best effort: a note that is late or rate limited is dropped, so
        a flood of refused clicks never holds up the session's card updates and answers behind it."""
        if event.at is not None and time.time() - event.at.timestamp() > NOTE_FRESH_S:
            log.info("refusal note for %s in %s dropped: %.0fs late", user, session.session_id,
                     time.time() - event.at.timestamp())
            return
        client = await self.client_for(session.team_id)
        # where the click was made (a DM copy, App Home), else the card's thread
        where = event.reply_to or {"channel_id": session.channel["channel_id"],
                                   "thread_ts": session.channel.get("thread_ts") or ""}
        try:
            await tell_privately(client, user, refused_text(event.reason), channel=where.get("channel_id"),
                                 thread_ts=where.get("thread_ts") or None)
        except SlackApiError as exc:
            if exc.response.status_code != 429 and exc.response.get("error") != "ratelimited":
                raise
            log.info("refusal note for %s in %s dropped: rate limited", user, session.session_id)

    async def _candidate(self, event: ApprovalCandidate, session: SessionRef) -> None:
        user = event.responder.slack_user_id if event.responder else None
        if event.outcome in ("rejected", "failed") and user:
            await self._refusal_note(event, session, user)
        elif event.outcome == "pending" and event.approvals > 0:
            record = await self.store.pass_request(session.session_id, event.request_id)
            card = await self._card(session, event.request_id)
            if card is None:
                return
            approvers = [p.rsplit(":", 1)[-1] for p in record.approvals]
            message = render_waiting(record.request, approvers, event.required, record.escalated_to)
            client = await self.client_for(session.team_id)
            await self.pacing.updates.wait(session.team_id or "")
            await client.chat_update(channel=card["channel"], ts=card["ts"], text=message["text"],
                                     blocks=message["blocks"])

    async def _escalated(self, event: InputEscalated | InputRespondersChanged, session: SessionRef) -> None:
        """The card says who else may answer now (their buttons already work: ``bot.engine.settle``), after an
        escalation or a change of the approver list its rule reads."""
        record = await self.store.pass_request(session.session_id, event.request_id)
        card = await self._card(session, event.request_id)
        if record.status != "open" or card is None:
            return
        required = record.request.responders.required if record.request.responders else 1
        message = render_waiting(record.request, [p.rsplit(":", 1)[-1] for p in record.approvals], required,
                                 record.escalated_to)
        client = await self.client_for(session.team_id)
        await self.pacing.updates.wait(session.team_id or "")
        await client.chat_update(channel=card["channel"], ts=card["ts"], text=message["text"],
                                 blocks=message["blocks"])

    async def _resolved(self, event: InputResolved, session: SessionRef) -> Awaitable[Any] | None:
        """Each resolved request's card, settled: read and rendered in order; the edits are returned under
        way. Nothing changes a card once it is settled, so no later event of the pass races them."""
        edits = []
        for resolution in event.resolutions:
            record = await self.store.pass_request(session.session_id, resolution.request_id)
            card = await self._card(session, resolution.request_id)
            if card is None:
                continue
            message = settled_card(record, resolution, event.at)
            client = await self.client_for(session.team_id)
            await self.pacing.updates.wait(session.team_id or "")
            edits.append(client.chat_update(channel=card["channel"], ts=card["ts"], text=message["text"],
                                            blocks=message["blocks"]))
        return asyncio.gather(*edits) if edits else None

    # --- replies and status -------------------------------------------------------------------

    async def _post_reply(self, session: SessionRef, event: MessageCompleted) -> None:
        for i, message in enumerate(answer_messages(event.text)):
            await self._post_once(session, answer_field(event.seq, i), message, at=event_time(event))


def slack_failure(exc: SlackApiError, what: str) -> Exception | None:
    """What a Slack error means for the outbox: wait (429), retry (5xx, transient), or None: log, skip."""
    error = exc.response.get("error")
    if exc.response.status_code == 429 or error == "ratelimited":
        return RetryLater(retry_after(exc), f"Slack rate limited {what}")
    if exc.response.status_code >= 500 or error in TRANSIENT_ERRORS:
        return exc
    return None

