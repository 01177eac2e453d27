"""Messages that tell people a request waits on them (pure builders; handlers/delivery/notices.py sends them).

- :func:`approver_notice` — the direct message an approver gets: who asked, where (a link to the
  thread), and a working copy of the card, so they can decide without looking for it.
- :func:`thread_mention` — the one line that mentions the approvers under the card (``notify="thread"``).
- :func:`reminder_message` — a reminder in the thread (and again by DM) when ``remind_after`` passes.
- :func:`notice_digest` — many requests for one person at once: one message listing them instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from slack_sdk.models.blocks import ContextBlock, MarkdownTextObject

from blocks.cards import render_request, request_summary
from blocks.deadlines import duration_text
from blocks.limits import MESSAGE_TEXT, escape_mrkdwn, truncate_mrkdwn
from blocks.messages import Message
from blocks.people import responders_text
from blocks.text import mention, slack_date, user_mention
from bot.principals import Principal
from bot.protocol import InputRequest

DIGEST_AFTER = 3  # more requests than this for one person in one go: one digest message instead


def _where(channel_id: str | None, link: str | None) -> str:
    place = f"in <#{channel_id}>" if channel_id and channel_id[:1] in "CG" else "in a conversation with the app"
    return place + (f" · <{link}|Open the thread>" if link else "")


def notice_head(req: InputRequest, *, channel_id: str | None, link: str | None, settled: bool = False) -> dict:
    """The line above an approver's copy of a card: who asked, where, a link to the thread."""
    verb = "approval" if req.kind == "tool-approval" else "answer"
    said = f"asked for your {verb}" if settled else f"needs your {verb}"
    text = f":bell: {mention(req.principal)} {said} {_where(channel_id, link)}"
    return ContextBlock(elements=[MarkdownTextObject(text=text)]).to_dict()


def approver_notice(req: InputRequest, *, channel_id: str | None, link: str | None,
                    approvals: Sequence[str] = (), required: int = 1, escalated: Sequence[Principal] = ()) -> Message:
    """A DM with a working copy of the card: its buttons settle the same request as the original."""
    verb = "approval" if req.kind == "tool-approval" else "answer"
    blocks = [notice_head(req, channel_id=channel_id, link=link),
              *render_request(req, approvals=approvals, required=required, escalated=escalated)]
    text = f"{mention(req.principal)} needs your {verb}: {escape_mrkdwn(request_summary(req))}"
    return {"text": truncate_mrkdwn(text, MESSAGE_TEXT), "blocks": blocks}


def thread_mention(req: InputRequest, people: Sequence[str]) -> Message:
    """ "@bob, @carol: your approval is needed above — refund_charge" (once per request)."""
    verb = "approval" if req.kind == "tool-approval" else "answer"
    who = ", ".join(user_mention(u) for u in people)
    return {"text": truncate_mrkdwn(f"{who}: your {verb} is needed above — {escape_mrkdwn(request_summary(req))}",
                                    MESSAGE_TEXT)}


def reminder_message(req: InputRequest, *, now_waiting_s: float, link: str | None = None) -> Message:
    """ "⏰ Still waiting after 2 h: Waiting on @bob or @carol — Approval needed: refund_charge …"."""
    who = responders_text(req) or "Waiting for an answer"
    line = f":alarm_clock: Still waiting after {duration_text(timedelta(seconds=now_waiting_s))}: {who}"
    line += f" — {escape_mrkdwn(request_summary(req, 200).rstrip('.'))}"
    if req.expires_at is not None:
        line += f". Expires {slack_date(req.expires_at)}"
    if link:
        line += f" · <{link}|See the request>"
    return {"text": truncate_mrkdwn(line, MESSAGE_TEXT)}


def escalation_message(req: InputRequest, people: Sequence[Principal], *, waited_s: float) -> Message:
    """ "⬆️ Nobody answered in 8 h: escalated to @dana — they can approve too." """
    verb = "approve" if req.kind == "tool-approval" else "answer"
    who = ", ".join(mention(p) for p in people)
    line = (f":arrow_up: Nobody answered in {duration_text(timedelta(seconds=waited_s))}: escalated to {who}"
            f" — they can {verb} too. {escape_mrkdwn(request_summary(req, 200))}")
    return {"text": truncate_mrkdwn(line, MESSAGE_TEXT)}


def notice_digest(reqs: Sequence[InputRequest], *, channel_id: str | None, link: str | None) -> Message:
    """One message for many requests that wait on the same person: what they are, where, and that the
    app's Home tab lists them all with their buttons."""
    lines = [f":bell: {len(reqs)} requests need your decision {_where(channel_id, link)}:"]
    lines += [f"• {escape_mrkdwn(request_summary(r, 150))} ({mention(r.principal)})" for r in reqs[:10]]
    if len(reqs) > 10:
        lines.append(f"• … and {len(reqs) - 10} more")
    lines.append("Open the app's *Home* tab to decide them one by one.")
    return {"text": truncate_mrkdwn("\n".join(lines), MESSAGE_TEXT)}
