"""Request cards: what people see when the agent parks a turn, and the same card once settled.

A card is a list of blocks whose block ids all start with the request id (see
:func:`blocks.actions.block_id`), so several cards can share one message and one of them can be
replaced in place (:func:`replace_request_blocks`). Every text is truncated visibly to Slack's
limits. The card is built as plain Block Kit dicts (it is on every approval's path: see :mod:`blocks.text`
for why, and tests/test_blocks_cards_golden.py for the proof that Slack gets the same JSON as from
slack_sdk's models).

A card is where people decide, so text from the model or a tool (the prompt, option labels, the tool's
input, a typed answer or note) can neither ping anyone nor dress a link up as another one:
prompts and labels go through :func:`blocks.messages.decision_mrkdwn` / ``decision_plain``, the
tool's input and people's words are shown exactly (``literal_mrkdwn``), and every mrkdwn text object is
``verbatim`` so Slack adds no links or mentions of its own. The mentions the card makes itself
("Requested by <@U0ALICE>", who approved) are built here from verified ids and stay real mentions.

The card is assembled here from its parts, each in its own module: :mod:`blocks.text` (mentions, dates,
text blocks), :mod:`blocks.fields` (the tool's input), :mod:`blocks.people` (who asked, who may answer),
:mod:`blocks.controls` (buttons and menus), :mod:`blocks.grants` ("don't ask again"),
:mod:`blocks.outcomes` (settled labels), :mod:`blocks.deadlines`; the modals a card opens are in
:mod:`blocks.modals`, what a clicker sees privately in :mod:`blocks.ephemeral`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from blocks import actions as ids
from blocks.controls import controls
from blocks.deadlines import schedule_text
from blocks.fields import field_texts, form_field_titles
from blocks.grants import granted_text
from blocks.limits import (
    MESSAGE_BLOCKS,
    MESSAGE_TEXT,
    SECTION_FIELDS,
    SECTION_TEXT,
    escape_mrkdwn,
    one_line,
    truncate,
    truncate_mrkdwn,
)
from blocks.messages import Message, decision_mrkdwn, decision_plain, literal_mrkdwn, no_pings
from blocks.outcomes import NO_LONGER_NEEDED, delegation_detail, outcome_emoji, resolution_label
from blocks.people import people_text, progress_text, requester_text, responders_text
from blocks.text import (
    fields_section,
    inline_code,
    request_context,
    request_section,
    slack_date,
    tool_name_of,
    user_mention,
)
from bot.principals import Principal
from bot.protocol import PREVIEW_UNAVAILABLE, InputRequest, RequestRecord, Resolution

CARD_MAX_FIELDS = 20  # two sections of fields; the rest is summarised so one card stays small


RESULT_BY_TOKEN = "Sent from another system with their result token."  # a settled card's line for ``via="api"``


def subagent_text(agent: str) -> str:
    """The context line on a sub-agent's request (``bot.agents``): who is asking."""
    return f":robot_face: From sub-agent *{escape_mrkdwn(one_line(agent))}*"


def replied_detail(req: InputRequest) -> str:
    """A settled approval's line when it was answered in the tool's place ("Reply instead")."""
    return f"{one_line(tool_name_of(req))} did not run: the agent read this reply as its result."


def preview_text(preview: str) -> str:
    """The card's preview line (``@tool(preview=…)``): a tool's text, held to the card's rules like its
    prompt (links show their real host); it may echo what a person typed, so nothing in it pings."""
    if preview == PREVIEW_UNAVAILABLE:
        return ":grey_question: _Preview unavailable_"
    return f":mag: Preview: {truncate_mrkdwn(decision_mrkdwn(no_pings(one_line(preview))), 500)}"


def request_summary(req: InputRequest, limit: int = 300) -> str:
    """One plain line saying what a request is about (fallback text, lists)."""
    if req.kind == "tool-approval":
        alone = f"Approval needed: {tool_name_of(req)}"
        lead = alone + " — "
    elif req.kind == "session-limit":
        lead, alone = "Session limit: ", "Session limit reached"
    elif req.kind == "user-input":
        lead, alone = "Form to fill in: ", "Form to fill in"
    elif req.kind == "external-result":
        alone = f"Run elsewhere: {tool_name_of(req)}"
        lead = alone + " — "
    elif req.kind == "delegation":
        task = str((req.action.input or {}).get("task", "")) if req.action else ""
        alone = f"{req.agent or 'A sub-agent'} is working on it"
        return truncate(f"{req.agent or 'A sub-agent'} is working on: {decision_plain(task, limit)}" if task else alone,
                        limit)
    else:
        lead, alone = "Question: ", "Question"
    prompt = decision_plain(req.prompt, max(limit - len(lead), 1))  # cut between links, not inside one
    return truncate(lead + prompt if prompt else alone, limit)


def _title_text(req: InputRequest, prompt_limit: int, *, pending: bool = True) -> str:
    prompt = decision_mrkdwn(req.prompt).strip()
    if req.kind == "tool-approval":
        emoji = ":warning: " if req.dangerous else ""
        tool_name = tool_name_of(req)
        # a settled card says what it was about; only a pending one says something is needed
        title = f"{emoji}*{'Approval needed:' if pending else 'Approval for'}* {inline_code(tool_name)}"
        if prompt and one_line(req.prompt) not in (tool_name, f"Run {tool_name}?"):  # never the name twice
            title += "\n" + truncate_mrkdwn(prompt, prompt_limit)
        return title
    if req.kind == "external-result":
        title = f":outbox_tray: *{'Run elsewhere:' if pending else 'Run elsewhere'}* {inline_code(tool_name_of(req))}"
        return title + ("\n" + truncate_mrkdwn(prompt, prompt_limit) if prompt else "")
    if req.kind == "delegation":
        task = str((req.action.input or {}).get("task", "")) if req.action else ""
        agent = escape_mrkdwn(one_line(req.agent or "A sub-agent"))
        title = f":robot_face: *{agent}* {'is working on' if pending else 'was asked'}:"
        return title + ("\n" + truncate_mrkdwn(literal_mrkdwn(task), prompt_limit) if task.strip() else "")
    if req.kind == "session-limit":
        title = ":stopwatch: *Session limit reached*"
        return title + ("\n" + truncate_mrkdwn(prompt, prompt_limit) if prompt else "")
    return truncate_mrkdwn(prompt, prompt_limit) if prompt else "_(no question text)_"


def card_blocks(
    req: InputRequest,
    *,
    tag: str = "",
    interactive: bool = True,
    requester_name: str | None = None,
    approvals: Sequence[str] = (),
    required: int = 1,
    prompt_limit: int = SECTION_TEXT - 200,
    max_fields: int = CARD_MAX_FIELDS,
    pending: bool | None = None,
    escalated: Sequence[Principal] = (),
    now: datetime | None = None,
    was: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The card as Block Kit dicts. ``tag`` prefixes block-id kinds so each iteration of a card
    (pending, waiting, settled, App Home) has its own block ids. ``pending`` (default: ``interactive``):
    still open, so it says who may answer and when it expires, even where this viewer has no buttons.
    ``escalated``: the people it was escalated to, who may answer too. ``now`` (App Home): a line of
    what is due when — reminder, escalation, expiry — instead of the expiry alone. ``was``: the proposed
    input of a call an approver edited (``req`` carries what ran); each changed field says what it was."""
    pending = interactive if pending is None else pending
    rid = req.request_id
    blocks = [request_section(rid, f"{tag}title", _title_text(req, prompt_limit, pending=pending))]
    if req.agent and req.kind != "delegation":  # a sub-agent asks: say which one
        blocks.append(request_context(rid, f"{tag}agent", subagent_text(req.agent)))
    if req.kind in ("tool-approval", "external-result") and req.action is not None:
        fields = field_texts(req.action.input, max_fields, req.action.shown_as, was, req.action.labels)
        blocks.extend(fields_section(rid, f"{tag}input", fields[start : start + SECTION_FIELDS], n)
                      for n, start in enumerate(range(0, len(fields), SECTION_FIELDS)))
    if req.preview is not None and req.action is not None:
        blocks.append(request_context(rid, f"{tag}preview", preview_text(req.preview)))
    who = requester_text(req, requester_name)
    if pending and (answerers := responders_text(req)):
        who += f" · {answerers}"
    if pending and escalated:
        who += f" · escalated to {people_text(escalated, 'and')}"
    if req.expires_at is not None and pending and now is None:
        who += f" · expires {slack_date(req.expires_at)}"
    if req.kind == "user-input" and (titles := form_field_titles(req)):
        listed = " · ".join(literal_mrkdwn(one_line(t)) for t in titles.values())
        blocks.append(request_context(rid, f"{tag}fields", f":clipboard: {len(titles)} to fill in: {listed}"))
    if req.kind != "session-limit":
        blocks.append(request_context(rid, f"{tag}who", who))
    if pending and now is not None and (due := schedule_text(req, now=now, escalated=bool(escalated))):
        blocks.append(request_context(rid, f"{tag}due", due))
    if required > 1 or approvals:
        blocks.append(request_context(rid, f"{tag}votes", progress_text(approvals, required)))
    if interactive:
        blocks.extend(controls(req, tag))
    return blocks


def render_request(
    req: InputRequest,
    *,
    requester_name: str | None = None,
    approvals: Sequence[str] = (),
    required: int = 1,
    escalated: Sequence[Principal] = (),
) -> list[dict]:
    """The pending card for one request, as Block Kit dicts."""
    tag = ("e-" if escalated else "") + (f"w{len(approvals)}-" if approvals else "")
    return card_blocks(req, tag=tag, requester_name=requester_name, approvals=approvals, required=required,
                       escalated=escalated)


def _fallback(lines: Iterable[str]) -> str:
    text = "\n".join(escape_mrkdwn(line) for line in lines if line)
    return truncate_mrkdwn(text or "A request needs your attention", MESSAGE_TEXT)


def render_requests(reqs: Sequence[InputRequest]) -> list[Message]:
    """Cards for several requests, packed into as few messages as Slack allows (≤50 blocks each)
    without splitting a card across messages."""
    messages: list[Message] = []
    blocks: list[dict] = []
    lines: list[str] = []
    for req in reqs:
        card = render_request(req)
        if blocks and len(blocks) + len(card) > MESSAGE_BLOCKS:
            messages.append({"text": _fallback(lines), "blocks": blocks})
            blocks, lines = [], []
        blocks.extend(card)
        lines.append(request_summary(req))
    if blocks:
        messages.append({"text": _fallback(lines), "blocks": blocks})
    return messages


def render_waiting(req: InputRequest, approvals: Sequence[str], required: int,
                   escalated: Sequence[Principal] = ()) -> Message:
    """The card while it waits on more people: n-of-m approvals so far, or an escalation; buttons stay."""
    lines = [request_summary(req)]
    if approvals or required > 1:
        lines.append(f"Approvals: {len(approvals)} of {max(required, 1)}")
    return {
        "text": _fallback(lines),
        "blocks": render_request(req, approvals=approvals, required=required, escalated=escalated),
    }


def render_settled(
    req: InputRequest,
    *,
    outcome_label: str,
    decided_by: str | None = None,
    at: datetime | None = None,
    detail: str | None = None,
    answer: str | None = None,
    note: str | None = None,
    approvals: Sequence[str] = (),
    required: int = 1,
    requester_name: str | None = None,
    edited_input: dict[str, Any] | None = None,
    values: dict[str, Any] | None = None,
    granted: str | None = None,
    edited_prompt: str | None = None,
) -> Message:
    """The card after settling: no buttons or menus; the outcome, who decided and when; a
    question's answer; a person's note (quoted, as theirs) and our own ``detail`` line. A call approved
    with ``edited_input`` leads with what ran (``edited_prompt``: its question for those values) and each
    changed field says what it was edited from."""
    rid = req.request_id
    label = one_line(outcome_label) or NO_LONGER_NEEDED
    shown, was = req, None
    if edited_input is not None and req.action is not None and edited_input != req.action.input:
        was = req.action.input or {}
        shown = req.model_copy(update={"prompt": edited_prompt or req.prompt,
                                       "action": req.action.model_copy(update={"input": edited_input})})
    blocks = card_blocks(
        shown,
        tag="s-",
        interactive=False,
        requester_name=requester_name,
        approvals=approvals,
        required=required,
        was=was,
    )
    line = f"{outcome_emoji(label)} *{escape_mrkdwn(truncate(label, 100))}*"
    if decided_by:
        line += f" by {user_mention(decided_by)}"
    if at is not None:
        line += f" · {slack_date(at)}"
    blocks.append(request_section(rid, "s-outcome", line))
    if answer is not None and answer.strip():
        blocks.append(request_section(rid, "s-answer", _answer_text(answer)))
    if values is not None:
        blocks.extend(_form_value_sections(req, values))
    if granted is not None and (grant_line := granted_text(req, granted)):
        blocks.append(request_context(rid, "s-grant", grant_line))
    if note is not None and note.strip():
        blocks.append(request_section(rid, "s-note", _quote(note)))
    if detail is not None and detail.strip():
        blocks.append(request_context(rid, "s-detail", escape_mrkdwn(detail.strip())))
    fallback = label + (f" by {user_mention(decided_by)}" if decided_by else "")
    return {"text": truncate_mrkdwn(fallback, MESSAGE_TEXT), "blocks": blocks}


def settled_card(record: RequestRecord, resolution: Resolution, at: datetime | None = None) -> Message:
    """A request's card once it is resolved, from its record and how it ended (the thread's card and the
    approvers' copies alike): who decided, what they answered, and a line on how it came (a result token, a
    sub-agent). A request nobody answered (ignored, cancelled) reads "no longer needed"."""
    req, response = record.request, resolution.response
    approved = response is not None and resolution.outcome == "approved"
    label = resolution_label(req, resolution.outcome, response.option_id if response else None,
                             response.values if response else None)
    answer = None
    if req.kind == "question" and response is not None:
        answer = response.text if response.text is not None else _option_label(req, response.option_id)
    replied = req.kind == "tool-approval" and resolution.outcome == "answered" and response is not None
    if replied and response is not None:  # answered in the tool's place: the words the agent read
        answer = response.text
    return render_settled(
        req,
        outcome_label=label if resolution.outcome not in ("ignored", "cancelled") else NO_LONGER_NEEDED,
        decided_by=response.principal.slack_user_id if response and response.principal else None,
        at=at,
        answer=answer,
        note=record.note,
        approvals=[p.rsplit(":", 1)[-1] for p in record.approvals],
        edited_input=response.edited_input if approved else None,
        edited_prompt=response.edited_prompt if approved else None,
        values=response.values if response is not None and req.kind in ("user-input", "external-result") else None,
        granted=response.grant if approved else None,
        detail=RESULT_BY_TOKEN if response and response.via == "api"
        else replied_detail(req) if replied
        else delegation_detail(req, response.values if response else None),
    )


def _option_label(req: InputRequest, option_id: str | None) -> str | None:
    option = req.option(option_id) if option_id else None
    return option.label if option else option_id


def _form_value_sections(req: InputRequest, values: dict[str, Any]) -> list[dict[str, Any]]:
    """What a form was filled in with, labelled as the form labelled it."""
    titles = form_field_titles(req)
    named = {titles.get(key, key): ("Yes" if value else "No") if isinstance(value, bool) else value
             for key, value in values.items() if value not in (None, [], "")}
    if not named:
        return [request_section(req.request_id, "s-values", "_(the form was sent empty)_")]
    texts = field_texts(named, CARD_MAX_FIELDS)
    return [fields_section(req.request_id, "s-values", texts[start : start + SECTION_FIELDS], n)
            for n, start in enumerate(range(0, len(texts), SECTION_FIELDS))]


def _answer_text(answer: str) -> str:
    text = answer.strip()
    if "\n" not in text and "*" not in text:  # one plain line reads best in bold
        return f":speech_balloon: *{truncate_mrkdwn(literal_mrkdwn(text), SECTION_TEXT - 20)}*"
    return truncate_mrkdwn(":speech_balloon:\n" + _quote(text), SECTION_TEXT)


def _quote(text: str) -> str:
    lines = literal_mrkdwn(text.strip()).split("\n")
    return truncate_mrkdwn("\n".join(f"> {line}" for line in lines), SECTION_TEXT)


def replace_request_blocks(blocks: Sequence[dict], request_id: str, new_blocks: Sequence[dict]) -> list[dict]:
    """A message's blocks with one request's card swapped for ``new_blocks`` (other cards in the
    same message keep their buttons). The new card goes where the old one started; if the old card
    is not there, the message is returned unchanged."""
    result: list[dict] = []
    replaced = False
    for block in blocks:
        if ids.request_id_of_block(block.get("block_id")) == request_id:
            if not replaced:
                result.extend(new_blocks)
                replaced = True
            continue
        result.append(block)
    return result
