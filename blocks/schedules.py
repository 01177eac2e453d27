"""How schedules read in Slack (``/agent schedules``, App Home)."""

from __future__ import annotations

from blocks.cards import inline_code, mention, slack_date
from blocks.limits import escape_mrkdwn, one_line, truncate
from bot.schedules import Schedule


def schedule_line(schedule: Schedule, *, with_owner: bool = False) -> str:
    """``a1b2c3d4`` · every 6h · next Dec 5, 09:00 · in <#C1>: “summarise open refunds”"""
    prompt = escape_mrkdwn(truncate(one_line(schedule.prompt), 200))
    line = (f"{inline_code(schedule.schedule_id)} · {escape_mrkdwn(schedule.when)} · next "
            f"{slack_date(schedule.next_at)} · in <#{schedule.channel}>: “{prompt}”")
    return line + (f" · for {mention(schedule.owner)}" if with_owner else "")
