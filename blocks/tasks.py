"""A turn's tool calls as the tasks of a streamed answer: Slack's stream chunks, as dicts.

``chat.startStream`` / ``appendStream`` / ``stopStream`` take ``chunks``: ``task_update`` ({id, title,
status: pending | in_progress | complete | error, details, output}), ``plan_update`` ({title}) and
``markdown_text`` ({text}); ``startStream``'s ``task_display_mode`` is ``timeline`` (each task its own card,
between the streamed text) or ``plan`` (all tasks together in one plan block). Pure: no Slack, no Redis.

A task is one tool call: its id is the call's id, its title the tool's name, its details say where the
approval stands ("waiting for <@U…>", "approved by <@U…>", "cancelled: too much") and its output is the
result in one line. People are written as ``<@U…>`` here: the sender names them (a task's text is plain,
so a mention would show as a raw id there).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from blocks.limits import one_line, truncate

TaskStatus = Literal["pending", "in_progress", "complete", "error"]
TASK_STATUSES = ("pending", "in_progress", "complete", "error")
DISPLAY_MODES = ("timeline", "plan")
TITLE_CHARS = 150  # a task's title is a short label; details and output stay one readable line each
DETAILS_CHARS = 300
OUTPUT_CHARS = 300
PLAN_TITLE = "Tool calls"
MENTION = re.compile(r"<@([A-Z0-9]+)>")


def display_mode(task_count: int) -> Literal["timeline", "plan"]:
    """One call reads best as a task card above the answer (timeline); several as one plan (Slack fixes the
    mode when the stream starts, so a call that comes later joins the timeline as a card of its own)."""
    return "plan" if task_count > 1 else "timeline"


def task_chunk(task: dict[str, Any]) -> dict[str, Any]:
    """A ``task_update`` chunk: the task's whole state (Slack replaces the task with the same id)."""
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": str(task["id"]),
        "title": truncate(one_line(str(task.get("title") or "tool call")), TITLE_CHARS),
        "status": task.get("status") if task.get("status") in TASK_STATUSES else "pending",
    }
    if task.get("details"):
        chunk["details"] = truncate(one_line(str(task["details"])), DETAILS_CHARS)
    if task.get("output"):
        chunk["output"] = truncate(one_line(str(task["output"])), OUTPUT_CHARS)
    return chunk


def plan_chunk(title: str = PLAN_TITLE) -> dict[str, Any]:
    return {"type": "plan_update", "title": truncate(one_line(title), TITLE_CHARS)}


def markdown_chunk(text: str) -> dict[str, Any]:
    return {"type": "markdown_text", "text": text}


def named(text: str, handles: dict[str, str]) -> str:
    """``<@U…>`` written as "@handle" (or "an approver" when Slack gave no name)."""
    return MENTION.sub(lambda m: f"@{handles[m.group(1)]}" if m.group(1) in handles else "an approver", text)


def mentioned(texts: list[str]) -> list[str]:
    """The user ids ``named`` would look up, in order, once each."""
    return list(dict.fromkeys(u for text in texts for u in MENTION.findall(text or "")))


# --- what a task says, by what happened to its call ------------------------------------------------------


def waiting_details(user_ids: list[str], required: int = 1) -> str:
    """Whom the card waits on: "waiting for <@U1> or <@U2>", or "waiting for approval"."""
    if not user_ids:
        return "waiting for approval"
    people = " or ".join(f"<@{u}>" for u in user_ids[:3]) + (" or others" if len(user_ids) > 3 else "")
    return f"waiting for {people}" + (f" ({required} approvals needed)" if required > 1 else "")


def approved_details(user_id: str | None) -> str:
    return f"approved by <@{user_id}>" if user_id else "approved"


def cancelled_details(user_id: str | None, reason: str | None) -> str:
    if reason:
        return f"cancelled: {reason}"
    return f"cancelled by <@{user_id}>" if user_id else "cancelled"


def unanswered_details(outcome: str) -> str:
    """A card that ended without a decision: it expired, or the turn went on without it."""
    return "expired: nobody answered in time" if outcome == "expired" else "no longer needed"


def standing_details(granted_by: str | None) -> str:
    return f"approved earlier by <@{granted_by}> (don't ask again)" if granted_by else "approved earlier"


def result_summary(status: str, output: Any, error: str | None) -> str:
    """The call's result in one line: what it returned, or why it failed or did not run."""
    if status == "failed":
        return one_line(f"failed: {error}" if error else "failed")
    if status == "rejected":
        message = output.get("message") if isinstance(output, dict) else None
        return one_line(f"not run: {message}" if message else "not run")
    if output is None:
        return "done"
    text = output if isinstance(output, str) else json.dumps(output, default=str, ensure_ascii=False)
    return truncate(one_line(text), OUTPUT_CHARS) or "done"


def refused_reason(output: Any) -> str | None:
    """Why the approval policy refused a call (its ``rejected`` result's message)."""
    return output.get("message") if isinstance(output, dict) and output.get("message") else None
