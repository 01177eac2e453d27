"""When things are due, in words: short durations ("2 h 30 min") and a request's schedule of reminder,
escalation and expiry (App Home, notices)."""

from __future__ import annotations

from datetime import datetime, timedelta

from blocks.text import inline_code, slack_date
from bot.governance import list_name
from bot.protocol import InputRequest


def schedule_text(req: InputRequest, *, now: datetime, escalated: bool = False) -> str:
    """What is due when, e.g. "Reminder <date> · escalates to the `finance_managers` list <date> ·
    expires <date>" (past steps in the past tense); "" when the request has no deadlines."""
    parts: list[str] = []
    if req.remind_at is not None:
        parts.append(("reminded " if req.remind_at <= now else "reminder ") + slack_date(req.remind_at))
    if req.escalate_at is not None and req.escalate_to:
        done = escalated or req.escalate_at <= now
        parts.append(f"{'escalated' if done else 'escalates'} to the {inline_code(list_name(req.escalate_to))} list "
                     + slack_date(req.escalate_at))
    if req.expires_at is not None:
        parts.append("expires " + slack_date(req.expires_at))
    text = " · ".join(parts)
    return text[:1].upper() + text[1:]


def duration_text(delta: timedelta) -> str:
    """A short human duration: 45 s, 20 min, 3 h, 2 h 30 min, 2 days."""
    seconds = max(int(delta.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h" + (f" {rest} min" if rest else "")
    return f"{hours // 24} days"
