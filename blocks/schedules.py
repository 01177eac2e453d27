"""How schedules read in Slack (``/agent schedules``, App Home)."""

from __future__ import annotations

from blocks.limits import escape_mrkdwn, one_line, truncate
from blocks.text import inline_code, mention, slack_date
from bot.engine.schedules import Schedule


def when_text(schedule: Schedule) -> str:
    """When it runs, in words, naming the zone its clock times are read in: "every day at 09:00 Europe/Paris",
    "at 2026-12-24 09:00 UTC"; relative ones ("every 6h", "in 30m") as written."""
    head, _, rest = schedule.when.partition(" ")
    if head == "daily":
        return f"every day at {rest} {schedule.tz}"
    if head == "at":
        return f"{schedule.when} {schedule.tz}"
    return schedule.when


def schedule_line(schedule: Schedule, *, with_owner: bool = False) -> str:
    """``a1b2c3d4`` · every day at 09:00 Europe/Paris · next Dec 5, 09:00 · in <#C1>: “summarise open refunds”
    (the next time is a Slack date token: each reader sees it in their own zone)."""
    prompt = escape_mrkdwn(truncate(one_line(schedule.prompt), 200))
    line = (f"{inline_code(schedule.schedule_id)} · {escape_mrkdwn(when_text(schedule))} · next "
            f"{slack_date(schedule.next_at)} · in <#{schedule.channel}>: “{prompt}”")
    return line + (f" · for {mention(schedule.owner)}" if with_owner else "")
