"""``/agent``: schedule turns the app runs on your behalf (``bot.engine.schedules``), list and remove them.

- ``/agent schedule <when> <prompt>`` — e.g. ``/agent schedule daily 09:00 summarise open refunds``;
  each time it comes due, the agent starts a thread in this channel and works on the prompt as you:
  the approvals it needs come to you (or to whoever the tools' rules name).
- ``/agent schedules`` — yours, with their ids and next times.
- ``/agent unschedule <id>`` — remove one of yours (admins remove anyone's in the app's Home tab).

The schedule is written to Redis before Slack gets its answer, which is the reply itself (one short
round trip): nothing here waits on Slack.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from slack_bolt.async_app import AsyncApp

from blocks.schedules import schedule_line
from bot.engine.admission import GUEST_REFUSAL, admits
from bot.engine.schedules import WHEN_HELP, ScheduleError, known_zone, new_schedule, split_command
from bot.principals import Principal
from handlers.identity import command_principal
from handlers.shared.deps import SlackDeps

log = logging.getLogger(__name__)

COMMAND = "/agent"
# Slack wants the ack within 3 s: who the person is (a guest?) may take this long of it; users.info is cached
LOOKUP_SECONDS = 1.5
USAGE = (
    "*/agent* — work the agent does on its own, on your behalf\n"
    "• `/agent schedule <when> <what>` — e.g. `/agent schedule daily 09:00 summarise open refunds`\n"
    f"   _when_: {WHEN_HELP}\n"
    "• `/agent schedules` — yours\n"
    "• `/agent unschedule <id>` — remove one"
)


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_command(ack: Any, body: dict[str, Any]) -> None:
        await ack(text=await answer(deps, body))

    app.command(COMMAND)(on_command)


async def answer(deps: SlackDeps, body: dict[str, Any]) -> str:
    """What ``/agent …`` does, as the private reply Slack shows."""
    principal = command_principal(body)
    store = deps.runtime.schedules
    if principal is None or principal.slack_user_id is None or store is None:
        return "I couldn't tell who you are; try again from Slack."
    sub, _, rest = (body.get("text") or "").strip().partition(" ")
    team = principal.team_id
    now = datetime.fromtimestamp(deps.runtime.settings.clock(), UTC)
    if sub == "schedule":
        principal = await _as_slack_knows(deps, principal)
        if principal is None:
            return "I couldn't check who you are just now; try again in a minute."
        if not await admits(principal, body.get("channel_id"), source=deps.policies, via="schedule"):
            log.info("%s may not schedule turns in %s", principal.principal_id, body.get("channel_id"))
            return GUEST_REFUSAL
        when, prompt = split_command(rest)
        tz = await _time_zone(deps, principal)
        try:
            schedule = new_schedule(team, body.get("channel_id") or "", when, prompt, principal, now, tz=tz or "UTC")
        except ScheduleError as exc:
            return f":warning: {exc}.\n{USAGE}"
        await store.add(schedule)
        log.info("schedule %s added by %s", schedule.schedule_id, principal.principal_id)
        said = f":alarm_clock: Scheduled. {schedule_line(schedule)}"
        return said if tz else said + "\n_I couldn't read your time zone from Slack, so clock times are UTC._"
    if sub == "schedules":
        mine = [s for s in await store.list(team) if s.owner.same_as(principal)]
        if not mine:
            return "You have no schedules. " + USAGE.splitlines()[1].removeprefix("• ")
        return "Your schedules:\n" + "\n".join(f"• {schedule_line(s)}" for s in mine)
    if sub == "unschedule":
        schedule = await store.get(team, rest.strip())
        if schedule is None or not schedule.owner.same_as(principal):
            return f"You have no schedule `{rest.strip()[:40]}`. See yours with `/agent schedules`."
        await store.remove(schedule)
        return f"Removed: {schedule_line(schedule)}"
    return USAGE


async def _time_zone(deps: SlackDeps, principal: Principal) -> str | None:
    """The person's time zone from ``users.info`` (cached: usually read already by ``_as_slack_knows``);
    None when Slack gives none we know, or not in time — the schedule then says it is in UTC."""
    if deps.governance is None or principal.team_id is None or principal.slack_user_id is None:
        return None
    try:
        user = await asyncio.wait_for(deps.governance.admins.user(principal.team_id, principal.slack_user_id),
                                      LOOKUP_SECONDS)
    except TimeoutError:
        return None
    return known_zone(user.tz)


async def _as_slack_knows(deps: SlackDeps, principal: Principal) -> Principal | None:
    """The person with their own workspace as Slack says. A slash command's payload does not say whether
    its author is a Slack Connect guest, and a schedule runs as its owner long after: ask ``users.info``
    (cached) once, so the owner is stored as the guest they are and every tick can check them. None when
    Slack could not say in time (fail closed)."""
    if principal.attributes.get("user_team_id") != principal.team_id or deps.governance is None:
        return principal  # the payload already says (or no policy store: nobody is let in as a guest)
    assert principal.team_id is not None and principal.slack_user_id is not None
    try:
        user = await asyncio.wait_for(deps.governance.admins.user(principal.team_id, principal.slack_user_id),
                                      LOOKUP_SECONDS)
    except TimeoutError:
        return None
    if user.state == "unknown" or user.team_id is None:
        return None
    if user.belongs_to(principal.team_id):
        return principal
    return principal.model_copy(update={"attributes": {**principal.attributes, "user_team_id": user.team_id}})
