"""``/agent``: schedule turns the app runs on your behalf (``bot.schedules``), list and remove them.

- ``/agent schedule <when> <prompt>`` — e.g. ``/agent schedule daily 09:00 summarise open refunds``;
  each time it comes due, the agent starts a thread in this channel and works on the prompt as you:
  the approvals it needs come to you (or to whoever the tools' rules name).
- ``/agent schedules`` — yours, with their ids and next times.
- ``/agent unschedule <id>`` — remove one of yours (admins remove anyone's in the app's Home tab).

The schedule is written to Redis before Slack gets its answer, which is the reply itself (one short
round trip): nothing here waits on Slack.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from slack_bolt.async_app import AsyncApp

from blocks.schedules import schedule_line
from bot.schedules import WHEN_HELP, ScheduleError, new_schedule, split_command
from handlers.deps import SlackDeps
from handlers.identity import command_principal

log = logging.getLogger(__name__)

COMMAND = "/agent"
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
        when, prompt = split_command(rest)
        try:
            schedule = new_schedule(team, body.get("channel_id") or "", when, prompt, principal, now)
        except ScheduleError as exc:
            return f":warning: {exc}.\n{USAGE}"
        await store.add(schedule)
        log.info("schedule %s added by %s", schedule.schedule_id, principal.principal_id)
        return f":alarm_clock: Scheduled. {schedule_line(schedule)}"
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
