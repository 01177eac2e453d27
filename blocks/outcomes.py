"""How a settled request's outcome reads on its card and in notices: "Approved", "Cancelled",
"Expired after 24 h — nobody answered", "No longer needed", with the emoji that goes with each."""

from __future__ import annotations

from typing import Any

from blocks.deadlines import duration_text
from blocks.limits import one_line, truncate
from bot.protocol import APPROVE, CANCEL, STOP, InputRequest, ResolutionOutcome, SettledOutcome

NO_LONGER_NEEDED = "No longer needed"
_POSITIVE = {"approved", "answered", "continued", "approve", "continue", "filled in", "result submitted", "finished"}
_NEGATIVE = {"cancelled", "canceled", "denied", "stopped", "rejected", "cancel", "stop", "not finished"}


def delegation_detail(req: InputRequest, values: dict[str, Any] | None) -> str | None:
    """The settled delegation card's line: the sub-agent answered, or why it did not."""
    if req.kind != "delegation" or values is None:
        return None
    agent = one_line(req.agent or "The sub-agent")
    if values.get("error"):
        return truncate(f"No answer: {one_line(str(values['error']))}", 300)
    return f"{agent} answered; the agent carries on with it."


def outcome_emoji(outcome_label: str) -> str:
    key = outcome_label.strip().lower()
    if key in _POSITIVE:
        return ":white_check_mark:"
    if key in _NEGATIVE:
        return ":no_entry_sign:"
    if key == REPLIED.lower():
        return ":speech_balloon:"
    if key.startswith("expired"):
        return ":hourglass:"
    return ":heavy_minus_sign:"


REPLIED = "Replied instead"  # an approval answered in the tool's place: it did not run


def settlement_label(outcome: SettledOutcome) -> str:
    """The label for an ``approval.settled`` outcome (a person pressed Approve or Cancel, or replied instead)."""
    return {"approved": "Approved", "responded": REPLIED}.get(outcome, "Cancelled")


def resolution_label(req: InputRequest, outcome: ResolutionOutcome, option_id: str | None = None,
                     values: dict[str, Any] | None = None) -> str:
    """The label for an ``input.resolved`` outcome. An expired request says how long it waited; a
    cancelled *turn* or an ignored request are "No longer needed" — nobody decided them. A delegation
    whose sub-agent failed (``values`` carry its error) did not finish."""
    if outcome == "approved":
        return "Approved"
    if outcome == "denied":
        return "Cancelled"
    if outcome == "answered":
        if req.kind == "session-limit":
            return "Stopped" if option_id == STOP else "Approved"
        if req.kind == "tool-approval":  # answered with words, not a button: in the tool's place
            return {APPROVE: "Approved", CANCEL: "Cancelled"}.get(option_id or "", REPLIED)
        if req.kind == "delegation" and values and values.get("error"):
            return "Not finished"
        return {"user-input": "Filled in", "external-result": "Result submitted",
                "delegation": "Finished"}.get(req.kind, "Answered")
    if outcome == "expired":
        return expired_label(req)
    return NO_LONGER_NEEDED


def expired_label(req: InputRequest) -> str:
    """ "Expired after 24 h — nobody answered" (how long it was open, when that is known); a delegation
    whose sub-agent ran out of time says so instead."""
    if req.kind == "delegation" and req.expires_at is not None:
        return f"Stopped after {duration_text(req.expires_at - req.created_at)} — the sub-agent ran out of time"
    if req.expires_at is None:
        return "Expired — nobody answered"
    return f"Expired after {duration_text(req.expires_at - req.created_at)} — nobody answered"
