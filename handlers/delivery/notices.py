"""Telling the people who can act (a consumer of the outbox, ``bot.engine.outbox``, with a cursor of its own).

When a request needs someone other than the person who asked, they hear of it where they are:

- ``notify="dm"`` (the default when the tool's policy names approvers): each approver gets a direct
  message with a working copy of the card and a link to the thread; every copy is updated with the
  card (approvals so far, then the outcome), so a copy never offers buttons that no longer count.
  Many requests for one person in one go become one digest instead.
- ``notify="thread"``: one line under the card mentions them.
- ``notify="none"``: nothing beyond the card.

At the request's ``remind_at`` (``input.reminded``), the thread gets a reminder naming who may
answer, and each approver told by DM gets it again by DM. At its ``escalate_at``
(``input.escalated``), the thread says who it was escalated to and each of them gets a working copy.
When an approver list the request's rule reads changes while it waits (``input.responders``), the copies
already sent say who may answer now, and each person newly able to answer gets a working copy (once).

Each message is claimed in Redis before it is sent (beside the session's card positions), so a
repeat of an event never sends it twice; a send that failed after its claim is not repeated either
(one missed notice rather than two), and says so in the log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from slack_sdk.errors import SlackApiError

from blocks.cards import render_waiting, settled_card
from blocks.messages import Message
from blocks.notices import (
    DIGEST_AFTER,
    approver_notice,
    escalation_message,
    notice_digest,
    notice_head,
    reminder_message,
    thread_mention,
)
from bot.ports import RetryLater
from bot.protocol import (
    ApprovalCandidate,
    Event,
    InputEscalated,
    InputReminded,
    InputRequest,
    InputRequested,
    InputResolved,
    InputRespondersChanged,
    RequestRecord,
)
from bot.session import SessionRef
from handlers.delivery.channel import card_field, slack_failure
from handlers.delivery.pacing import SlackPacing
from handlers.shared.deps import ClientFor
from store.outbox import RedisOutbox

log = logging.getLogger(__name__)


def notified(req: InputRequest) -> tuple[str, list[str]]:
    """How the people who may settle ``req`` are told, and who they are (Slack user ids, never the
    requester, who asked in the thread and sees the card there)."""
    r = req.responders
    people: list[str] = []
    if r is not None and r.rule == "people":
        asker = req.principal.slack_user_id if req.principal else None
        people = [p.slack_user_id for p in r.people if p.slack_user_id and p.slack_user_id != asker]
    mode = req.notify or ("dm" if people else "none")
    return (mode, people) if people else ("none", [])


@dataclass(frozen=True)
class DirectMessage:
    """Where a notice goes when it goes to a person: their DM with the app (opened when first needed)."""

    user: str


class ApproverNotices:
    """A ``bot.ports.Channel``: direct messages and mentions for the people a request waits on."""

    def __init__(self, store: RedisOutbox, client_for: ClientFor, pacing: SlackPacing | None = None):
        self.store = store
        self.ledger = store.posts  # where the session's posts are
        self.client_for = client_for
        self.pacing = pacing or SlackPacing()

    async def deliver(self, event: Event, session: SessionRef) -> None:
        if not session.channel.get("channel_id"):
            return  # not a Slack session
        try:
            if isinstance(event, InputRequested):
                await self._requested(event, session)
            elif isinstance(event, InputReminded):
                await self._reminded(event, session)
            elif isinstance(event, InputEscalated):
                await self._escalated(event, session)
            elif isinstance(event, InputRespondersChanged):
                await self._responders_changed(event, session)
            elif isinstance(event, ApprovalCandidate) and event.outcome == "pending" and event.approvals > 0:
                record = await self.store.pass_request(session.session_id, event.request_id)
                approvals = [p.rsplit(":", 1)[-1] for p in record.approvals]
                await self._update_copies(session, record, partial(render_waiting, record.request, approvals,
                                                                    event.required, record.escalated_to),
                                          approvals=approvals, required=event.required)
            elif isinstance(event, InputResolved):
                for resolution in event.resolutions:
                    record = await self.store.pass_request(session.session_id, resolution.request_id)
                    await self._update_copies(session, record, partial(settled_card, record, resolution, event.at))
        except SlackApiError as exc:
            failure = slack_failure(exc, f"a notice for {event.type}")
            if failure is None:  # a closed DM, a deactivated approver…: the card in the thread still stands
                log.warning("Slack refused a notice for %s in %s: %s", event.type, session.session_id,
                            exc.response.get("error"))
                return
            raise failure from exc

    # --- when a request is made -----------------------------------------------------------------

    async def _requested(self, event: InputRequested, session: SessionRef) -> None:
        by_person: dict[str, list[InputRequest]] = {}
        for req in event.requests:
            mode, people = notified(req)
            if mode == "thread":
                await self._post_once(session, f"mention:{req.request_id}", session.channel["channel_id"],
                                      thread_mention(req, people), thread_ts=session.channel.get("thread_ts"))
            elif mode == "dm":
                for user in people:
                    by_person.setdefault(user, []).append(req)
        if not by_person:
            return
        link = await self._thread_link(session)
        channel_id = session.channel.get("channel_id")
        for user, reqs in by_person.items():
            dm = DirectMessage(user)
            if len(reqs) > DIGEST_AFTER:
                await self._post_once(session, f"digest:{event.seq}:{user}", dm,
                                      notice_digest(reqs, channel_id=channel_id, link=link))
                continue
            for req in reqs:
                await self._post_once(session, f"dm:{req.request_id}:{user}", dm,
                                      approver_notice(req, channel_id=channel_id, link=link), link=link)

    async def _reminded(self, event: InputReminded, session: SessionRef) -> None:
        record = await self.store.pass_request(session.session_id, event.request_id)
        if record.status != "open":
            return
        req = record.request
        # as long as the tool said to wait before reminding (the event's own time may be a sweep later)
        waited = ((req.remind_at or event.at) - req.created_at).total_seconds()
        card = await self.ledger.get(session.session_id, card_field(req.request_id))
        link = await self._permalink(session, json.loads(card)) if card and card.startswith("{") else None
        await self._post_once(session, f"remind:{req.request_id}", session.channel["channel_id"],
                              reminder_message(req, now_waiting_s=waited),
                              thread_ts=session.channel.get("thread_ts"))
        mode, people = notified(req)
        if mode != "dm":
            return
        for user in people:
            await self._post_once(session, f"remind:{req.request_id}:{user}", DirectMessage(user),
                                  reminder_message(req, now_waiting_s=waited, link=link))

    async def _escalated(self, event: InputEscalated, session: SessionRef) -> None:
        record = await self.store.pass_request(session.session_id, event.request_id)
        if record.status != "open":
            return
        req = record.request
        people = [p.slack_user_id for p in event.people if p.slack_user_id]
        waited = ((req.escalate_at or event.at) - req.created_at).total_seconds()
        await self._post_once(session, f"escalate:{req.request_id}", session.channel["channel_id"],
                              escalation_message(req, event.people, waited_s=waited),
                              thread_ts=session.channel.get("thread_ts"))
        link = await self._thread_link(session)
        channel_id = session.channel.get("channel_id")
        for user in people:
            await self._post_once(session, f"dm:{req.request_id}:{user}", DirectMessage(user),
                                  approver_notice(req, channel_id=channel_id, link=link,
                                                  escalated=record.escalated_to), link=link)

    async def _responders_changed(self, event: InputRespondersChanged, session: SessionRef) -> None:
        record = await self.store.pass_request(session.session_id, event.request_id)
        if record.status != "open":
            return
        req = record.request
        approvals = [p.rsplit(":", 1)[-1] for p in record.approvals]
        required = req.responders.required if req.responders else 1
        removed = [p.slack_user_id for p in event.removed if p.slack_user_id]
        await self._update_copies(session, record, partial(render_waiting, req, approvals, required, record.escalated_to),
                                  approvals=approvals, required=required, also=removed)
        mode, people = notified(req)  # the people the rule names now: outsiders were left out already
        added = {p.slack_user_id for p in event.added}
        new = [u for u in people if u in added] if mode == "dm" else []
        if not new:
            return
        link = await self._thread_link(session)
        channel_id = session.channel.get("channel_id")
        for user in new:  # keyed like the first copies: someone told before is not told twice
            await self._post_once(session, f"dm:{req.request_id}:{user}", DirectMessage(user),
                                  approver_notice(req, channel_id=channel_id, link=link, approvals=approvals,
                                                  required=required, escalated=record.escalated_to), link=link)

    # --- keeping copies current -------------------------------------------------------------------

    async def _update_copies(self, session: SessionRef, record: RequestRecord, render: Callable[[], Message],
                             *, approvals: list[str] | None = None, required: int = 1,
                             also: list[str] | None = None) -> None:
        """Every approver's copy of the card shows what ``render`` gives (the settled or waiting card). The
        card is rendered only when someone may have a copy: most requests have none, and a card costs CPU on
        every approval's path."""
        req = record.request
        mode, people = notified(req)
        told = (people if mode == "dm" else []) + [p.slack_user_id for p in record.escalated_to if p.slack_user_id]
        told += also or []  # e.g. people taken off the list: their copies show who may answer now
        if not told:
            return
        card = render()
        card_blocks, text = card["blocks"], card["text"]
        client = await self.client_for(session.team_id)
        for user in dict.fromkeys(told):
            raw = await self.ledger.get(session.session_id, f"dm:{req.request_id}:{user}")
            if not raw or not raw.startswith("{"):
                continue  # never sent (a digest, a failure)
            where = json.loads(raw)
            channel_id, link = session.channel.get("channel_id"), where.get("link")
            if approvals is not None:  # still open: the copy keeps its buttons and shows the approvals so far
                blocks = approver_notice(req, channel_id=channel_id, link=link, approvals=approvals,
                                         required=required, escalated=record.escalated_to)["blocks"]
            else:
                blocks = [notice_head(req, channel_id=channel_id, link=link, settled=True), *card_blocks]
            await self.pacing.updates.wait(session.team_id or "")
            await client.chat_update(channel=where["channel"], ts=where["ts"], text=text, blocks=blocks)

    # --- Slack ------------------------------------------------------------------------------------

    async def _dm(self, session: SessionRef, user: str) -> str:
        client = await self.client_for(session.team_id)
        opened = await client.conversations_open(users=user)
        return opened["channel"]["id"]

    async def _thread_link(self, session: SessionRef) -> str | None:
        ts = session.channel.get("thread_ts")
        if not ts:
            return None
        return await self._permalink(session, {"channel": session.channel["channel_id"], "ts": ts})

    async def _permalink(self, session: SessionRef, where: dict[str, Any]) -> str | None:
        client = await self.client_for(session.team_id)
        try:
            return (await client.chat_getPermalink(channel=where["channel"], message_ts=where["ts"])).get("permalink")
        except SlackApiError:
            return None  # a notice without a link is still a notice

    async def _post_once(self, session: SessionRef, field: str, to: str | DirectMessage, message: dict[str, Any], *,
                         thread_ts: str | None = None, link: str | None = None) -> None:
        if not await self.ledger.claim(session.session_id, field, "claimed"):
            return  # sent before (or tried: one missed notice rather than two)
        client = await self.client_for(session.team_id)
        try:
            # a DM is opened only for a message not sent before
            channel = await self._dm(session, to.user) if isinstance(to, DirectMessage) else to
            await self.pacing.posts.wait(channel)
            resp = await client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=message["text"],
                                                 blocks=message.get("blocks"))
        except (SlackApiError, RetryLater):  # Slack said no, or not yet (pacing): nothing was sent
            await self.ledger.delete(session.session_id, field)
            raise
        kept: dict[str, Any] = {"channel": resp.get("channel", channel), "ts": resp["ts"]}
        if link:
            kept["link"] = link  # a copy's link to the thread, kept when its card is updated
        await self.ledger.set(session.session_id, field, json.dumps(kept), in_pass=True)
