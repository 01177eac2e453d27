"""Slack's stop button under a ``processing`` agent session (``agent_session_stopped``).

It stops the turn exactly as the runtime's cancel does for anyone else (``Runtime.cancel_turn``): open
requests resolve as no longer needed, a running tool is told, nothing of the turn runs afterwards. The
committed ``turn.cancelled`` then closes the session and says so in the thread (``handlers.delivery.channel``), on
whichever replica delivers it. Slack does not move the status itself, so a click on a session with no turn
left (a stale status) moves it to ``active`` here.

Who: the clicker from the verified event; like a typed stop, only the person whose turn it is may stop it
(``Runtime.stop_pressed`` refuses anyone else: fail closed), and they are told privately.

Which turn: the one it was pressed on. Slack sends the event again (same ``event_id``, ``X-Slack-Retry-Num``)
when it did not see the 200 in time, up to minutes later: a redelivery is dropped by its event id
(``SlackDeps.once``), and a press that reaches the bot only after its turn ended (its first delivery
failed) finds that turn over by the press's own time (``event_ts``): a turn started since goes on.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError

from bot.engine.turns import StopResult
from bot.principals import Principal
from bot.session import slack_session_id
from handlers.delivery.private_notes import tell_privately
from handlers.identity import event_principal, installation_team
from handlers.shared.deps import SlackDeps

log = logging.getLogger(__name__)

NOT_YOURS = "Only the person who asked can stop this. The agent goes on."


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_stopped(body: dict[str, Any], event: dict[str, Any], client: Any) -> None:
        principal = event_principal(body, event)
        team, channel_id, thread_ts = installation_team(body), event.get("channel"), event.get("thread_ts")
        if principal is None or not team or not channel_id or not thread_ts:
            return
        sid = slack_session_id(team, channel_id, thread_ts)
        async with deps.once(body) as first:
            if not first:
                return  # Slack sent it again: the press was acted on already
            # the stop is written before the ack (Slack sends no retry after a 200): a kill -9 after it leaves
            # the turn due, and whichever worker drives it next ends it; this process ends it in the background
            result = await deps.runtime.stop_pressed(sid, principal, pressed_at=pressed_at(body, event),
                                                     background=True)
        if result in ("not theirs", "nothing"):  # told after the ack
            deps.tasks.spawn(_tell(client, sid, result, principal, channel_id, thread_ts), what=f"stop button in {sid}")

    app.event("agent_session_stopped")(on_stopped)


def pressed_at(body: dict[str, Any], event: dict[str, Any]) -> datetime | None:
    """When the button was pressed, by Slack's clock: the event's ``event_ts``, else the envelope's
    ``event_time`` (None: neither is there)."""
    for raw in (event.get("event_ts"), body.get("event_time")):
        try:
            seconds = float(raw) if isinstance(raw, str | int | float) and not isinstance(raw, bool) else None
        except ValueError:
            seconds = None
        if seconds is not None and math.isfinite(seconds) and seconds > 0:
            return datetime.fromtimestamp(seconds, UTC)
    return None


async def _tell(client: Any, sid: str, result: StopResult, principal: Principal, channel_id: str,
                thread_ts: str) -> None:
    """Stopped: turn.cancelled, once committed, closes the session and says so in the thread. Over: the turn it
    was pressed on has ended (a late delivery), and a later turn goes on untouched. Otherwise, said here."""
    try:
        if result == "not theirs":  # someone else's turn: it goes on
            await tell_privately(client, principal.slack_user_id or "", NOT_YOURS, channel=channel_id,
                                 thread_ts=thread_ts)
        else:  # nothing running: the status was stale
            await client.agents_sessions_setStatus(channel_id=channel_id, thread_ts=thread_ts, status="active")
    except SlackApiError as exc:  # a courtesy: the turn's state is what counts
        log.info("stop button in %s: %s", sid, exc.response.get("error"))
