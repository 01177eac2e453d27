"""Who a request is about, in words: who asked, who may answer as its response policy described itself
(policies describe themselves), and who has approved so far. Mentions are built from verified
ids; a policy's own words are shown literally, so they ping nobody."""

from __future__ import annotations

from collections.abc import Sequence

from blocks.limits import escape_mrkdwn, one_line, truncate_mrkdwn
from blocks.messages import literal_mrkdwn
from blocks.text import mention, user_mention
from bot.principals import Principal
from bot.protocol import InputRequest


def requester_text(req: InputRequest, requester_name: str | None = None) -> str:
    principal = req.principal
    if principal is not None and principal.slack_user_id:
        who = mention(principal)
    elif requester_name:
        who = escape_mrkdwn(one_line(requester_name))
    elif principal is None:
        return "Requested in this thread"
    elif principal.principal_type == "runtime":
        who = "the app itself"
    else:
        who = "someone outside Slack"
    if req.kind == "question":
        return f"Question for {who}"
    return f"Requested by {who}"


NAMED_AT_MOST = 5  # people named on a card before "or N others"
ADD_APPROVERS = "a workspace admin adds approvers in the app's Home tab or with `/approvers`"


def people_text(people: Sequence[Principal], joiner: str) -> str:
    names = [mention(p) for p in people[:NAMED_AT_MOST]]
    rest = len(people) - len(names)
    if rest > 0:
        return ", ".join(names) + f" {joiner} {rest} other{'s' if rest > 1 else ''}"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" {joiner} " + names[-1]


def responders_text(req: InputRequest) -> str | None:
    """Who may settle the request, as its policy described itself: "Waiting on @bob or @carol",
    "Needs 2 of @a, @b, @c", "Anyone but @dave can approve", "Only @alice (who asked) can approve"."""
    r = req.responders
    if r is None:
        return None
    verb = "approve" if req.kind == "tool-approval" else "answer"
    if r.rule == "requester" and r.people:
        if req.principal is not None and r.people[0].same_as(req.principal):
            return f"Only {mention(r.people[0])} (who asked) can {verb}"
        return f"Only {mention(r.people[0])} can {verb}"
    if r.rule == "people" and r.people:
        # what else the rule asks of them, in its own words ("one of them a manager")
        more = f", {truncate_mrkdwn(literal_mrkdwn(one_line(r.description)), 100)}" if r.description else ""
        if r.required > 1:
            return f"Needs {r.required} of {people_text(r.people, 'and')}{more}"
        return f"Waiting on {people_text(r.people, 'or')}{more}"
    if r.rule == "anyone_but" and r.people:
        if r.required > 1:
            return f"Needs {r.required} people other than {people_text(r.people, 'and')}"
        return f"Anyone but {people_text(r.people, 'and')} can {verb}"
    if r.rule == "anyone":
        return f"Needs {r.required} people to {verb}" if r.required > 1 else f"Anyone here can {verb}"
    if r.rule == "nobody":
        said = literal_mrkdwn(one_line(r.description)) if r.description else f"Nobody can {verb} this yet"
        return f"{said}: {ADD_APPROVERS}"
    if r.rule == "custom" and r.description:
        return f"Who can {verb}: {truncate_mrkdwn(literal_mrkdwn(one_line(r.description)), 200)}"
    return f"Who can {verb} is decided by a custom rule"


def progress_text(approvals: Sequence[str], required: int) -> str:
    """``Approvals: 1 of 2 — <@U1>`` for n-of-m approvals."""
    text = f"Approvals: {len(approvals)} of {max(required, 1)}"
    if approvals:
        text += " — " + ", ".join(user_mention(u) for u in approvals)
    return text
