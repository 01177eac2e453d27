"""Messages in: mentions, DMs and replies in threads that have a session (DESIGN §10).

Slack sends a channel mention twice (``app_mention`` and ``message``): the ``message`` twin is
dropped here, in memory; Slack also retries deliveries, and the runtime drops repeats by message id
(channel + ts) in Redis, so each message reaches the agent once. A
message is recorded in Redis before the ack, so one that Slack saw acknowledged is never lost.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError

from bot.engine.admission import GUEST_REFUSAL, admits, audit_refusal
from bot.engine.inputs import NOTHING_WAITING, strip_mention
from bot.engine.turns import PostResult
from bot.principals import Principal
from bot.session import SessionRef, slack_session_id
from handlers.delivery.private_notes import tell_privately
from handlers.delivery.sessions import TITLE_FIELD, title_of
from handlers.identity import event_principal, installation_enterprise, installation_team
from handlers.shared.deps import SlackDeps

log = logging.getLogger(__name__)

# Message subtypes that are still a person writing; everything else (edits, deletes, joins) is ignored.
PERSON_SUBTYPES = {None, "file_share", "thread_broadcast"}


GUEST_TEXT = GUEST_REFUSAL  # the one refusal, the same at every entry point (``bot.engine.admission``)


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_mention(body: dict[str, Any], event: dict[str, Any], context: dict[str, Any], client: Any) -> None:
        await _handle(deps, body, event, context, client, mentioned=True)

    async def on_message(body: dict[str, Any], event: dict[str, Any], context: dict[str, Any], client: Any) -> None:
        if _twin_of_a_mention(event, context.get("bot_user_id")):
            return  # its app_mention brings it: one record instead of two
        await _handle(deps, body, event, context, client, mentioned=False)

    app.event("app_mention")(on_mention)
    app.event("message")(on_message)


def _twin_of_a_mention(event: dict[str, Any], bot_user: str | None) -> bool:
    """A channel message that mentions the bot: Slack sends it as ``app_mention`` too (the manifest
    subscribes both), and that event carries it. Not in a DM, where no ``app_mention`` comes."""
    return (event.get("channel_type") != "im" and bool(bot_user) and f"<@{bot_user}>" in (event.get("text") or "")
            and event.get("subtype") in PERSON_SUBTYPES)


async def may_talk(deps: SlackDeps, principal: Principal, org: str | None, channel_id: str | None) -> bool:
    """Whether this person may talk to the agent (start or steer a turn): the one admission rule,
    ``bot.engine.admission.admits``, over this app's policy store. ``org`` is the installation's Enterprise org
    from the verified payload (the principal carries it too). Fails closed."""
    if org and not principal.attributes.get("enterprise_id"):
        principal = principal.model_copy(update={"attributes": {**principal.attributes, "enterprise_id": org}})
    return await admits(principal, channel_id, source=deps.policies)


async def _tell_guest(client: Any, user_id: str, channel_id: str, thread_ts: str | None) -> None:
    try:
        await tell_privately(client, user_id, GUEST_TEXT, channel=channel_id, thread_ts=thread_ts)
    except SlackApiError as exc:  # a courtesy: Slack refusing it changes nothing
        log.info("could not tell %s why their message was not passed on: %s", user_id, exc.response.get("error"))


async def handle_message(deps: SlackDeps, body: dict[str, Any], event: dict[str, Any], context: dict[str, Any],
                         client: Any) -> str | None:
    """A person's message that no mention brought (``handlers.assistant`` routes assistant threads' here).
    Returns the session the message is recorded in (now, or before: a repeat), None when it was not."""
    return await _handle(deps, body, event, context, client, mentioned=False)


async def _handle(
    deps: SlackDeps, body: dict[str, Any], event: dict[str, Any], context: dict[str, Any], client: Any, *,
    mentioned: bool,
) -> str | None:
    if event.get("bot_id") or event.get("subtype") not in PERSON_SUBTYPES:
        return None
    principal = event_principal(body, event)
    team, org = installation_team(body), installation_enterprise(body)
    channel_id, ts = event.get("channel"), event.get("ts")
    if principal is None or not team or not channel_id or not ts:
        return None
    bot_user = context.get("bot_user_id")
    text = event.get("text") or ""
    mentioned = mentioned or bool(bot_user and f"<@{bot_user}>" in text)
    thread_ts = event.get("thread_ts")
    if event.get("channel_type") == "im" and not thread_ts:
        # a DM without threads is one running conversation; replies go to the DM itself
        sid = slack_session_id(team, channel_id, "dm")
        ref = SessionRef(session_id=sid, team_id=team, enterprise_id=org, channel={"channel_id": channel_id, "thread_ts": ""})
    else:
        root = thread_ts or ts
        sid = slack_session_id(team, channel_id, root)
        # the agent session's title, its first request's (a session keeps the ref of its first message)
        ref = SessionRef(session_id=sid, team_id=team, enterprise_id=org, channel={
            "channel_id": channel_id, "thread_ts": root, TITLE_FIELD: title_of(strip_mention(text, bot_user))})
        if event.get("channel_type") != "im" and not mentioned and not await deps.store.exists(sid):
            return None  # a thread the agent is not part of
    if not await may_talk(deps, principal, org, channel_id):
        async with deps.once(body) as first:
            if not first:
                return None  # Slack sent it again: refused, audited and told already
            await audit_refusal(principal, channel_id, source=deps.policies, via="message")
        # told once, where they asked (a mention arrives twice: only its app_mention tells), not on every reply;
        # a top-level message is answered in the channel: its own thread has no replies, so nobody opens it
        if event.get("type") == "app_mention" or event.get("channel_type") == "im":
            deps.tasks.spawn(_tell_guest(client, event["user"], channel_id, thread_ts),
                             what=f"tell a guest in {channel_id}")
        return None
    # recorded before Slack gets its ack (the app runs with process_before_response): an acknowledged
    # message is never lost, even if this process dies right after; the rest runs in the engine's background
    # task (it answers, steers, queues or starts a turn with it, and drives the turn with the record's lease)
    arrived = await deps.runtime.receive_message(ref, principal, strip_mention(text, bot_user),
                                                 message_id=f"{channel_id}:{ts}")
    if arrived is None:
        return sid  # a repeat: the mention's twin event or a Slack retry
    deps.tasks.spawn(_tell_if_nothing_waiting(client, arrived, principal.slack_user_id, channel_id, thread_ts),
                     what=f"after message {channel_id}:{ts} in {sid}")
    return sid


async def _tell_if_nothing_waiting(client: Any, arrived: asyncio.Task[PostResult], user_id: str | None,
                                   channel_id: str, thread_ts: str | None) -> None:
    """A bare "approve" with nothing waiting is told so, privately."""
    try:
        result = await arrived
    except Exception:  # noqa: BLE001 - the engine's task logged it
        return
    if result.state != "nothing waiting" or not user_id:
        return
    try:
        await tell_privately(client, user_id, NOTHING_WAITING, channel=channel_id, thread_ts=thread_ts)
    except SlackApiError as exc:  # a courtesy: Slack refusing it changes nothing
        log.info("could not tell %s nothing is waiting: %s", user_id, exc.response.get("error"))
