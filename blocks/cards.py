"""Request cards: what people see when the agent parks a turn, and the same card once settled.

A card is a list of blocks whose block ids all start with the request id (see
:func:`blocks.actions.block_id`), so several cards can share one message and one of them can be
replaced in place (:func:`replace_request_blocks`). Every text is truncated visibly to Slack's
limits; slack_sdk's models validate each block as it is built.

A card is where people decide, so text from the model or a tool (the prompt, option labels, the tool's
input, a typed answer or note) can neither ping anyone nor dress a link up as another one (issue 9):
prompts and labels go through :func:`blocks.messages.decision_mrkdwn` / ``decision_plain``, the
tool's input and people's words are shown exactly (``literal_mrkdwn``), and every mrkdwn text object is
``verbatim`` so Slack adds no links or mentions of its own. The mentions the card makes itself
("Requested by <@U0ALICE>", who approved) are built here from verified ids and stay real mentions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    RadioButtonsElement,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from blocks import actions as ids
from blocks.forms import field_label, humanised
from blocks.limits import (
    ACTIONS_ELEMENTS,
    BUTTON_TEXT,
    CONFIRM_BUTTON,
    CONFIRM_TEXT,
    CONFIRM_TITLE,
    CONTEXT_TEXT,
    ELLIPSIS,
    FIELD_TEXT,
    MESSAGE_BLOCKS,
    MESSAGE_TEXT,
    OPTION_DESCRIPTION,
    OPTION_TEXT,
    PLACEHOLDER,
    PLAIN_TEXT_INPUT,
    SECTION_FIELDS,
    SECTION_TEXT,
    SELECT_OPTIONS,
    VIEW_TITLE,
    escape_keeping_mentions,
    escape_mrkdwn,
    mrkdwn,
    one_line,
    plain,
    truncate,
    truncate_mrkdwn,
)
from blocks.messages import (
    Message,
    decision_mrkdwn,
    decision_plain,
    link_hosts,
    literal_mrkdwn,
    no_pings,
)
from bot.governance import list_name
from bot.principals import Principal
from bot.protocol import (
    APPROVE,
    CANCEL,
    CONTINUE,
    PREVIEW_UNAVAILABLE,
    STOP,
    Grant,
    GrantOffer,
    InputOption,
    InputRequest,
    ResolutionOutcome,
    SettledOutcome,
    approval_options,
    session_limit_options,
)

RADIO_MAX_OPTIONS = 5  # style="radio" takes up to this many options; more go into a select menu
CARD_MAX_FIELDS = 20  # two sections of fields; the rest is summarised so one card stays small
TOOL_NAME_CHARS = 100
FREEFORM_LABEL = "Type your own answer"
NO_LONGER_NEEDED = "No longer needed"

_POSITIVE = {"approved", "answered", "continued", "approve", "continue", "filled in", "result submitted", "finished"}
_NEGATIVE = {"cancelled", "canceled", "denied", "stopped", "rejected", "cancel", "stop", "not finished"}


# --- small text helpers ---------------------------------------------------------------------


def mention(principal: Principal | None) -> str:
    """``<@U123>`` for a Slack user principal, otherwise ``someone``."""
    user_id = principal.slack_user_id if principal is not None else None
    return user_mention(user_id) if user_id else "someone"


def user_mention(user_id: str | None) -> str:
    return f"<@{user_id}>" if user_id else "someone"


def slack_date(at: datetime) -> str:
    """A date Slack shows in each reader's own time zone, with a UTC fallback."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    fallback = aware.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(aware.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def inline_code(name: str) -> str:
    """A name shown as inline code (backticks inside it would end the span)."""
    return "`" + escape_mrkdwn(truncate(one_line(name).replace("`", "'"), TOOL_NAME_CHARS) or "?") + "`"


def subagent_text(agent: str) -> str:
    """The context line on a sub-agent's request (``bot.agents``): who is asking."""
    return f":robot_face: From sub-agent *{escape_mrkdwn(one_line(agent))}*"


def delegation_detail(req: InputRequest, values: dict[str, Any] | None) -> str | None:
    """The settled delegation card's line: the sub-agent answered, or why it did not."""
    if req.kind != "delegation" or values is None:
        return None
    agent = one_line(req.agent or "The sub-agent")
    if values.get("error"):
        return truncate(f"No answer: {one_line(str(values['error']))}", 300)
    return f"{agent} answered; the agent carries on with it."


def preview_text(preview: str) -> str:
    """The card's preview line (``@tool(preview=…)``): a tool's text, held to the card's rules like its
    prompt (links show their real host); it may echo what a person typed, so nothing in it pings."""
    if preview == PREVIEW_UNAVAILABLE:
        return ":grey_question: _Preview unavailable_"
    return f":mag: Preview: {truncate_mrkdwn(decision_mrkdwn(no_pings(one_line(preview))), 500)}"


def tool_name_of(req: InputRequest) -> str:
    return req.action.tool_name if req.action is not None else "tool"


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


def _people(people: Sequence[Principal], joiner: str) -> str:
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
            return f"Needs {r.required} of {_people(r.people, 'and')}{more}"
        return f"Waiting on {_people(r.people, 'or')}{more}"
    if r.rule == "anyone_but" and r.people:
        if r.required > 1:
            return f"Needs {r.required} people other than {_people(r.people, 'and')}"
        return f"Anyone but {_people(r.people, 'and')} can {verb}"
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


def outcome_emoji(outcome_label: str) -> str:
    key = outcome_label.strip().lower()
    if key in _POSITIVE:
        return ":white_check_mark:"
    if key in _NEGATIVE:
        return ":no_entry_sign:"
    if key.startswith("expired"):
        return ":hourglass:"
    return ":heavy_minus_sign:"


def settlement_label(outcome: SettledOutcome) -> str:
    """The label for an ``approval.settled`` outcome (a person pressed Approve or Cancel)."""
    return "Approved" if outcome == "approved" else "Cancelled"


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
        if req.kind == "tool-approval":
            return "Approved" if option_id == APPROVE else "Cancelled"
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


# --- tool input as fields -------------------------------------------------------------------


FIELD_NAME_CHARS = 200
_UNCHANGED: Any = object()  # a field an approver did not edit
LINK_NOTE_HOSTS = 5


def _value_text(value: Any, limit: int) -> str:
    """A tool-input value as mrkdwn within ``limit``, shown exactly as the tool gets it: strings as
    written, numbers and booleans as JSON, nested values as compact JSON in a code span (cut inside the
    span, so it stays closed). The hosts its URLs go to are named below it when the text does not show
    them plainly after a "://" (user info, %-escapes, look-alike letters, hidden characters, a cut)."""
    if isinstance(value, str) and not value:
        return "_(empty)_"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return truncate(str(value), limit)
    nested = not isinstance(value, str)
    raw = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str) if nested else value
    hosts = link_hosts(raw)
    shown = _shown_value(raw, limit - len(_hosts_note(list(hosts))), code=nested)
    return shown + _hosts_note(
        [h for h, plainly in hosts.items() if not plainly or not _shows_host(shown, h)]
    )


def _shown_value(raw: str, limit: int, *, code: bool) -> str:
    text = literal_mrkdwn(raw)
    if not code or "`" in text:
        return truncate_mrkdwn(text, limit)
    return f"`{truncate_mrkdwn(text, limit - 2)}`"


def _shows_host(shown: str, host: str) -> bool:
    # after a "://", so a host only inside a path or cut off by truncation does not count
    return re.search(re.escape("://" + host) + r"(?![\w.-])", shown, re.I) is not None


def _hosts_note(hosts: list[str]) -> str:
    if not hosts:
        return ""
    listed = ", ".join(hosts[:LINK_NOTE_HOSTS])
    if len(hosts) > LINK_NOTE_HOSTS:
        listed += f" and {len(hosts) - LINK_NOTE_HOSTS} more"
    return f"\n_↳ links to {escape_mrkdwn(listed)}_"


CURRENCY_SIGNS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def money_text(value: float | int, currency: str) -> str:
    """$1,234.50 · -€40.00 · 1,200.00 CHF (a sign where one is common, else the code after)."""
    sign = CURRENCY_SIGNS.get(currency)
    amount = f"{abs(value):,.2f}"
    shown = f"{sign}{amount}" if sign else f"{amount} {currency}"
    return f"-{shown}" if value < 0 else shown


EDITED_VALUE_CHARS = 300  # of the value an approver changed, shown under the one that ran


def _field_text(key: Any, value: Any, shown_as: str | None = None, was: Any = _UNCHANGED,
                label: str | None = None) -> str:
    # named by the title the tool's code gave it (``Field(title=…)``), else by its key exactly as the tool
    # gets it: a key the model wrote is never reworded (two keys must not read alike)
    shown = field_label(str(key), label) if label else str(key)
    name = truncate_mrkdwn(literal_mrkdwn(one_line(shown)), FIELD_NAME_CHARS) or "_(no name)_"
    head = f"*{name}*\n"
    if was is _UNCHANGED:
        return head + _input_value_text(value, shown_as, FIELD_TEXT - len(head))
    # an approver changed it: the value that ran, and beside it what was proposed
    before = ("\n_edited (was not set)_" if was is None
              else f"\n_edited from {_input_value_text(was, shown_as, EDITED_VALUE_CHARS)}_")
    return head + _input_value_text(value, shown_as, FIELD_TEXT - len(head) - len(before)) + before


def _input_value_text(value: Any, shown_as: str | None, limit: int) -> str:
    """A tool-input value as the card shows it: money as money ("$40.00"), anything else exactly."""
    if shown_as and shown_as.startswith("money:") and isinstance(value, int | float) and not isinstance(value, bool):
        return escape_mrkdwn(money_text(value, shown_as.removeprefix("money:")))
    return _value_text(value, limit)


def _field_texts(tool_input: dict[str, Any] | None, max_fields: int, shown_as: dict[str, str] | None = None,
                 was: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> list[str]:
    """Each field as "*name*\nvalue"; with ``was`` (the proposed input of an edited call), a changed field
    also says what it was edited from."""
    items = list((tool_input or {}).items())
    shown = items if len(items) <= max_fields else items[: max_fields - 1]
    texts = [_field_text(key, value, (shown_as or {}).get(str(key)),
                         _UNCHANGED if was is None or was.get(key) == value else was.get(key),
                         (labels or {}).get(str(key)))
             for key, value in shown]
    if len(shown) < len(items):
        texts.append(f"*{ELLIPSIS}*\n_{len(items) - len(shown)} more fields not shown_")
    return texts


# --- the card -------------------------------------------------------------------------------


def _text(text: str) -> MarkdownTextObject:
    # verbatim: Slack must not turn words the model wrote ("@here", "stripe.com") into mentions or links;
    # the <…> tokens the card writes itself still render
    return MarkdownTextObject(text=text, verbatim=True)


def _section(request_id: str, kind: str, text: str, n: int = 0) -> SectionBlock:
    return SectionBlock(block_id=ids.block_id(request_id, kind, n), text=_text(mrkdwn(text, SECTION_TEXT)))


def _context(request_id: str, kind: str, text: str) -> ContextBlock:
    return ContextBlock(block_id=ids.block_id(request_id, kind), elements=[_text(mrkdwn(text, CONTEXT_TEXT))])


def _options_of(req: InputRequest) -> list[InputOption]:
    displayed = req.displayed_options()
    if displayed:
        return displayed
    if req.kind == "tool-approval":
        return approval_options()
    if req.kind == "session-limit":
        return session_limit_options()
    return []


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


def _button_style(req: InputRequest, option: InputOption) -> str | None:
    if option.id in (APPROVE, CONTINUE) and req.kind in ("tool-approval", "session-limit"):
        return "primary"
    if option.id == STOP and req.kind == "session-limit":
        return "danger"
    return option.style


def _confirm_for(req: InputRequest) -> ConfirmObject:
    tool = one_line(tool_name_of(req))
    return ConfirmObject(
        title=PlainTextObject(text=plain(f"Run {tool}?", CONFIRM_TITLE)),
        text=_text(
            truncate_mrkdwn(
                f"{inline_code(tool)} is marked as dangerous. It will run with the input shown on the card.",
                CONFIRM_TEXT,
            )
        ),
        confirm=PlainTextObject(text=plain("Run it", CONFIRM_BUTTON)),
        deny=PlainTextObject(text=plain("Not yet", CONFIRM_BUTTON)),
        style="danger",
    )


def _buttons(req: InputRequest, options: list[InputOption]) -> list[ButtonElement]:
    buttons: list[ButtonElement] = []
    primary_used = False
    for index, option in enumerate(options[:ACTIONS_ELEMENTS]):
        style = _button_style(req, option)
        if style == "primary":  # Slack: primary "should only be used for one button within a set"
            style = None if primary_used else style
            primary_used = True
        confirm = _confirm_for(req) if req.dangerous and option.id == APPROVE else None
        buttons.append(
            ButtonElement(
                text=PlainTextObject(text=plain(decision_plain(option.label, BUTTON_TEXT), BUTTON_TEXT)),
                action_id=ids.button_action_id(req.request_id, index),
                value=ids.button_value(index, option),
                style=style,
                confirm=confirm,
            )
        )
    return buttons


def _choice_options(options: list[InputOption]) -> list[Option]:
    result = []
    for index, option in enumerate(options[:SELECT_OPTIONS]):
        description = decision_plain(option.description or "", OPTION_DESCRIPTION)
        result.append(
            Option(
                value=ids.option_value(index, option),
                text=PlainTextObject(text=plain(decision_plain(option.label, OPTION_TEXT), OPTION_TEXT)),
                description=PlainTextObject(text=truncate(description, OPTION_DESCRIPTION))
                if description
                else None,
            )
        )
    return result


def _freeform_button(req: InputRequest, *, primary: bool) -> ButtonElement:
    return ButtonElement(
        text=PlainTextObject(text=FREEFORM_LABEL),
        action_id=ids.freeform_action_id(req.request_id),
        value=req.request_id,
        style="primary" if primary else None,
    )


EDIT_LABEL = "Edit & approve"
REASON_LABEL = "Cancel with reason"


def _modal_button(req: InputRequest, label: str, action_id: str) -> ButtonElement:
    return ButtonElement(text=PlainTextObject(text=label), action_id=action_id, value=req.request_id)


def _approval_controls(req: InputRequest, options: list[InputOption]) -> list[Any]:
    """Approve, [Edit & approve], [don't ask again], Cancel, Cancel with reason (the modal ones open modals)."""
    buttons: list[Any] = _buttons(req, options)
    if req.kind != "tool-approval":
        return buttons
    extras: list[Any] = []
    if req.editable:
        extras.append(_modal_button(req, EDIT_LABEL, ids.edit_action_id(req.request_id)))
    if req.grants:
        extras.append(_grant_control(req))
    buttons[1:1] = extras
    buttons.append(_modal_button(req, REASON_LABEL, ids.reason_action_id(req.request_id)))
    return buttons


GRANT_PLACEHOLDER = "Approve & don’t ask again…"


def grant_label(offer: GrantOffer) -> str:
    """How a "don't ask again" scope is named on a card."""
    if offer.scope == "conversation":
        return "Approve, don’t ask again here"
    return f"Approve, don’t ask again for {offer.days} days"


def grant_description(offer: GrantOffer) -> str:
    if offer.scope == "conversation":
        return "Calls like it run without asking for the rest of this conversation"
    return f"The requester's calls like it run without asking, in any conversation, for {offer.days} days"


def _grant_scope_text(req: InputRequest, offer: GrantOffer) -> str:
    if offer.scope == "conversation":
        return "won't ask again in this conversation"
    return f"won't ask {mention(req.principal)} again for {offer.days} days, in any conversation"


def _grant_confirm(req: InputRequest, offer: GrantOffer | None) -> ConfirmObject:
    tool = inline_code(one_line(tool_name_of(req)))
    scope = _grant_scope_text(req, offer) if offer else "stops asking in the scope you pick"
    return ConfirmObject(
        title=PlainTextObject(text=plain("Approve and stop asking?", CONFIRM_TITLE)),
        text=_text(truncate_mrkdwn(f"{tool} runs now, and {scope}. The requester or an admin can revoke this in "
                                   "the app's Home tab.", CONFIRM_TEXT)),
        confirm=PlainTextObject(text=plain("Approve", CONFIRM_BUTTON)),
        deny=PlainTextObject(text=plain("Not yet", CONFIRM_BUTTON)),
    )


def _grant_control(req: InputRequest) -> Any:
    """One scope: a button naming it. Several: a small menu, one option per scope."""
    action_id = ids.grant_action_id(req.request_id)
    if len(req.grants) == 1:
        [offer] = req.grants
        return ButtonElement(text=PlainTextObject(text=plain(grant_label(offer), BUTTON_TEXT)), action_id=action_id,
                             value=offer.scope, confirm=_grant_confirm(req, offer))
    options = [Option(value=o.scope, text=PlainTextObject(text=plain(grant_label(o), OPTION_TEXT)),
                      description=PlainTextObject(text=truncate(grant_description(o), OPTION_DESCRIPTION)))
               for o in req.grants]
    return StaticSelectElement(action_id=action_id, placeholder=PlainTextObject(text=GRANT_PLACEHOLDER),
                               options=options, confirm=_grant_confirm(req, None))


def granted_text(req: InputRequest, scope: str | None) -> str | None:
    """The settled card's line for a "don't ask again" that was given."""
    offer = next((o for o in req.grants if o.scope == scope), None)
    if offer is None:
        return None
    if offer.scope == "conversation":
        return ":unlock: Won’t ask again in this conversation"
    return f":unlock: Won’t ask {mention(req.principal)} again for {offer.days} days"


def standing_note(grant: Grant) -> dict[str, Any]:
    """The thread's line for a call that runs without asking: whose standing approval let it, how far
    it reaches, and where it is revoked (a call that skips its card is never silent)."""
    whose = f"{mention(grant.granted_by)}’s standing approval" if grant.granted_by else "a standing approval"
    if grant.scope == "conversation":
        reach = "in this conversation"
    else:
        reach = f"for {mention(grant.requester)} in any conversation"
        reach += f" (until {slack_date(grant.expires_at)})" if grant.expires_at else ""
    text = (f":unlock: Ran without asking, under {whose} for {inline_code(one_line(grant.tool_name))} {reach}"
            " — revoke it in App Home to be asked again.")
    return {"text": text, "blocks": [ContextBlock(elements=[_text(mrkdwn(text, CONTEXT_TEXT))]).to_dict()]}


FORM_LABEL = "Open form"
FORM_ONLY_NOTE = "Typed replies don’t answer a form: use *Open form*."


def _form_controls(req: InputRequest, tag: str) -> list[Block]:
    button = ButtonElement(text=PlainTextObject(text=FORM_LABEL), action_id=ids.modal_action_id(req.request_id, "form"),
                           value=req.request_id, style="primary")
    return [ActionsBlock(block_id=ids.block_id(req.request_id, f"{tag}actions"), elements=[button]),
            _context(req.request_id, f"{tag}formnote", FORM_ONLY_NOTE)]


RESULT_LABEL = "Submit result"
TOKEN_LABEL = "Get a result token"
EXTERNAL_NOTE = ("Run it yourself, then *Submit result* with what it returned. A system can post the result "
                 "instead: *Get a result token*.")


def _external_controls(req: InputRequest, tag: str) -> list[Block]:
    """Submit result (a form of the tool's result model), Get a result token, Cancel, Cancel with reason."""
    rid = req.request_id
    submit = ButtonElement(text=PlainTextObject(text=RESULT_LABEL), action_id=ids.modal_action_id(rid, "form"),
                           value=rid, style="primary")
    token = ButtonElement(text=PlainTextObject(text=TOKEN_LABEL), action_id=ids.token_action_id(rid), value=rid)
    cancel = [o for o in req.displayed_options() if o.id == CANCEL]
    elements: list[Any] = [submit, token, *_buttons(req, cancel),
                           _modal_button(req, REASON_LABEL, ids.reason_action_id(rid))]
    return [ActionsBlock(block_id=ids.block_id(rid, f"{tag}actions"), elements=elements),
            _context(rid, f"{tag}extnote", EXTERNAL_NOTE)]


def form_field_titles(req: InputRequest) -> dict[str, str]:
    """A form request's field names and the labels people see (its schema's titles)."""
    properties = (req.form or {}).get("properties") or {}
    return {name: field_label(name, str(spec.get("title") or "")) if isinstance(spec, dict) else humanised(name)
            for name, spec in properties.items()}


def _controls(req: InputRequest, tag: str) -> list[Block]:
    options = _options_of(req)
    actions_id = ids.block_id(req.request_id, f"{tag}actions")
    if req.kind in ("tool-approval", "session-limit"):
        return [ActionsBlock(block_id=actions_id, elements=_approval_controls(req, options))]
    if req.kind == "user-input":
        return _form_controls(req, tag)
    if req.kind == "external-result":
        return _external_controls(req, tag)
    if req.kind == "delegation":  # the sub-agent answers it; people may only stop it
        return [ActionsBlock(block_id=actions_id, elements=_buttons(req, options))]
    elements: list[Any] = []
    if options and req.style == "buttons" and len(options) < ACTIONS_ELEMENTS:
        elements.extend(_buttons(req, options))
        if req.allow_free_text:
            elements.append(_freeform_button(req, primary=False))
    elif options:
        choices = _choice_options(options)
        if req.style == "radio" and len(options) <= RADIO_MAX_OPTIONS:
            elements.append(
                RadioButtonsElement(action_id=ids.select_action_id(req.request_id), options=choices)
            )
        else:
            elements.append(
                StaticSelectElement(
                    action_id=ids.select_action_id(req.request_id),
                    placeholder=PlainTextObject(text=plain("Choose an answer", PLACEHOLDER)),
                    options=choices,
                )
            )
        if req.allow_free_text:
            elements.append(_freeform_button(req, primary=False))
    else:  # an open question: typing is the only way to answer
        elements.append(_freeform_button(req, primary=True))
    blocks: list[Block] = [ActionsBlock(block_id=actions_id, elements=elements)]
    if len(options) > SELECT_OPTIONS:
        blocks.append(
            _context(
                req.request_id,
                f"{tag}more",
                f"Showing the first {SELECT_OPTIONS} of {len(options)} options. "
                "To pick another, reply in the thread with its number.",
            )
        )
    return blocks


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
) -> list[Block]:
    """The card as slack_sdk blocks. ``tag`` prefixes block-id kinds so each iteration of a card
    (pending, waiting, settled, App Home) has its own block ids. ``pending`` (default: ``interactive``):
    still open, so it says who may answer and when it expires, even where this viewer has no buttons.
    ``escalated``: the people it was escalated to, who may answer too. ``now`` (App Home): a line of
    what is due when — reminder, escalation, expiry — instead of the expiry alone. ``was``: the proposed
    input of a call an approver edited (``req`` carries what ran); each changed field says what it was."""
    pending = interactive if pending is None else pending
    rid = req.request_id
    blocks: list[Block] = [_section(rid, f"{tag}title", _title_text(req, prompt_limit, pending=pending))]
    if req.agent and req.kind != "delegation":  # a sub-agent asks: say which one
        blocks.append(_context(rid, f"{tag}agent", subagent_text(req.agent)))
    if req.kind in ("tool-approval", "external-result") and req.action is not None:
        fields = _field_texts(req.action.input, max_fields, req.action.shown_as, was, req.action.labels)
        for n, start in enumerate(range(0, len(fields), SECTION_FIELDS)):
            chunk = fields[start : start + SECTION_FIELDS]
            blocks.append(
                SectionBlock(
                    block_id=ids.block_id(rid, f"{tag}input", n),
                    fields=[_text(text) for text in chunk],
                )
            )
    if req.preview is not None and req.action is not None:
        blocks.append(_context(rid, f"{tag}preview", preview_text(req.preview)))
    who = requester_text(req, requester_name)
    if pending and (answerers := responders_text(req)):
        who += f" · {answerers}"
    if pending and escalated:
        who += f" · escalated to {_people(escalated, 'and')}"
    if req.expires_at is not None and pending and now is None:
        who += f" · expires {slack_date(req.expires_at)}"
    if req.kind == "user-input" and (titles := form_field_titles(req)):
        listed = " · ".join(literal_mrkdwn(one_line(t)) for t in titles.values())
        blocks.append(_context(rid, f"{tag}fields", f":clipboard: {len(titles)} to fill in: {listed}"))
    if req.kind != "session-limit":
        blocks.append(_context(rid, f"{tag}who", who))
    if pending and now is not None and (due := schedule_text(req, now=now, escalated=bool(escalated))):
        blocks.append(_context(rid, f"{tag}due", due))
    if required > 1 or approvals:
        blocks.append(_context(rid, f"{tag}votes", progress_text(approvals, required)))
    if interactive:
        blocks.extend(_controls(req, tag))
    return blocks


def _dicts(blocks: Iterable[Block]) -> list[dict]:
    return [block.to_dict() for block in blocks]


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
    return _dicts(card_blocks(req, tag=tag, requester_name=requester_name, approvals=approvals, required=required,
                              escalated=escalated))


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
    blocks.append(_section(rid, "s-outcome", line))
    if answer is not None and answer.strip():
        blocks.append(_section(rid, "s-answer", _answer_text(answer)))
    if values is not None:
        blocks.extend(_form_value_sections(req, values))
    if granted is not None and (grant_line := granted_text(req, granted)):
        blocks.append(_context(rid, "s-grant", grant_line))
    if note is not None and note.strip():
        blocks.append(_section(rid, "s-note", _quote(note)))
    if detail is not None and detail.strip():
        blocks.append(_context(rid, "s-detail", escape_mrkdwn(detail.strip())))
    fallback = label + (f" by {user_mention(decided_by)}" if decided_by else "")
    return {"text": truncate_mrkdwn(fallback, MESSAGE_TEXT), "blocks": _dicts(blocks)}


def _form_value_sections(req: InputRequest, values: dict[str, Any]) -> list[Block]:
    """What a form was filled in with, labelled as the form labelled it."""
    titles = form_field_titles(req)
    named = {titles.get(key, key): ("Yes" if value else "No") if isinstance(value, bool) else value
             for key, value in values.items() if value not in (None, [], "")}
    if not named:
        return [_section(req.request_id, "s-values", "_(the form was sent empty)_")]
    texts = _field_texts(named, CARD_MAX_FIELDS)
    return [SectionBlock(block_id=ids.block_id(req.request_id, "s-values", n),
                         fields=[_text(text) for text in texts[start : start + SECTION_FIELDS]])
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


# --- ephemeral texts ------------------------------------------------------------------------


def refused_text(reason: str | None) -> str:
    """What a clicker sees when the response policy refuses them."""
    why = one_line(reason or "")
    if not why:
        return ":no_entry: You can't answer this request."
    return truncate_mrkdwn(
        f":no_entry: You can't answer this request: {escape_keeping_mentions(why)}", SECTION_TEXT
    )


def already_settled_text(outcome_label: str, decided_by: str | None) -> str:
    """``Already approved by <@U7>.`` — for a click on a card someone else already settled."""
    label = one_line(outcome_label)
    if not label or label.lower() == NO_LONGER_NEEDED.lower():
        return "This request is no longer needed."
    text = f"Already {escape_mrkdwn(truncate(label, 100)).lower()}"
    return text + (f" by {user_mention(decided_by)}." if decided_by else ".")


def not_found_text() -> str:
    return "This request is no longer open."


# --- "Type your own answer" modal -----------------------------------------------------------

FREEFORM_TITLE = "Your answer"


def freeform_modal(req: InputRequest, channel_id: str, message_ts: str) -> dict:
    """The modal opened by "Type your own answer"; submits to callback ``hitl_freeform``."""
    prompt = decision_mrkdwn(req.prompt).strip() or "_(no question text)_"
    blocks = [
        SectionBlock(block_id=ids.block_id(req.request_id, "modal-prompt"),
                     text=_text(truncate_mrkdwn(prompt, SECTION_TEXT))),
        InputBlock(
            block_id=ids.FREEFORM_BLOCK_ID,
            label=PlainTextObject(text="Your answer"),
            element=PlainTextInputElement(action_id=ids.FREEFORM_ACTION_ID, multiline=True, max_length=PLAIN_TEXT_INPUT,
                                          placeholder=PlainTextObject(text="Type your answer here")),
        ),
    ]
    return _modal(req, ids.FREEFORM_CALLBACK_ID, FREEFORM_TITLE, "Send", channel_id, message_ts, blocks,
                  close="Cancel")


def freeform_answer(state_values: dict) -> str | None:
    """The text typed into the freeform modal (``view.state.values``), stripped; None if empty."""
    return _typed_text(state_values, ids.FREEFORM_BLOCK_ID, ids.FREEFORM_ACTION_ID)


def _typed_text(state_values: dict, block_id: str, action_id: str) -> str | None:
    value = ((state_values or {}).get(block_id) or {}).get(action_id) or {}
    text = value.get("value")
    return (text.strip() or None) if isinstance(text, str) else None


def result_token_text(req: InputRequest, url: str, token: str, expires_at: datetime) -> str:
    """The private note with a result token: where to post, how, until when, and to keep it secret."""
    fields = ", ".join(inline_code(name) for name in form_field_titles(req)) or "the result's fields"
    return (f"To send the result of {inline_code(tool_name_of(req))} from another system, POST it as JSON "
            f"(fields: {fields}) until {slack_date(expires_at)}. Anyone with this token answers as you; "
            f"it works once.\n```curl -X POST {url} \\\n  -H 'Authorization: Bearer {token}' \\\n"
            f"  -H 'Content-Type: application/json' -d '{{…}}'```")


# --- "Cancel with reason" and "Edit & approve" modals ---------------------------------------

REASON_TITLE = "Cancel request"
EDIT_TITLE = "Edit & approve"


def _modal(req: InputRequest, callback_id: str, title: str, submit: str, channel_id: str, message_ts: str,
           blocks: list[Any], *, close: str = "Back") -> dict:
    """An answer modal for ``req``'s card (its metadata says which card)."""
    view = View(
        type="modal",
        callback_id=callback_id,
        title=PlainTextObject(text=title),
        submit=PlainTextObject(text=submit),
        close=PlainTextObject(text=close),
        private_metadata=ids.modal_metadata(req.request_id, channel_id, message_ts),
        blocks=blocks,
    )
    return view.to_dict()


def reason_modal(req: InputRequest, channel_id: str, message_ts: str) -> dict:
    """Opened by "Cancel with reason"; submits to ``hitl_reason``. The reason is optional."""
    tool = inline_code(one_line(tool_name_of(req)))
    intro = SectionBlock(block_id=ids.block_id(req.request_id, "modal-reason"),
                         text=_text(f"Cancel {tool}? It will not run. The agent reads your reason as yours."))
    reason = InputBlock(
        block_id=ids.REASON_BLOCK_ID,
        label=PlainTextObject(text="Reason"),
        optional=True,
        element=PlainTextInputElement(action_id=ids.REASON_ACTION_ID, multiline=True, max_length=PLAIN_TEXT_INPUT,
                                      placeholder=PlainTextObject(text="e.g. Refunds over $100 need a ticket")),
    )
    return _modal(req, ids.REASON_CALLBACK_ID, REASON_TITLE, "Cancel request", channel_id, message_ts,
                  [intro, reason])


def reason_text(state_values: dict) -> str | None:
    """The reason typed into the reason modal, stripped; None when left empty."""
    return _typed_text(state_values, ids.REASON_BLOCK_ID, ids.REASON_ACTION_ID)


def edit_modal(req: InputRequest, form: list[dict], channel_id: str, message_ts: str) -> dict:
    """Opened by "Edit & approve"; ``form`` is the tool's arguments as inputs (``blocks.forms``),
    prefilled with what the agent proposed. Submitting approves with the edited arguments."""
    tool = inline_code(one_line(tool_name_of(req)))
    intro = SectionBlock(block_id=ids.block_id(req.request_id, "modal-edit"),
                         text=_text(f"Change what {tool} will run with, then approve. "
                                    "The card will show what you changed."))
    return _modal(req, ids.EDIT_CALLBACK_ID, EDIT_TITLE, "Approve", channel_id, message_ts, [intro, *form])


FORM_TITLE = "Fill in the form"
_GENERIC_FORM_NAMES = {"form", "requestedinfo", "model", "input", "inputs", "args", "arguments"}


def form_title(req: InputRequest) -> str:
    """What a form's modal is titled: its schema's title (a pydantic model's, or the one the model gave
    ``request_info``), as words when it is a class name, within Slack's 24 characters; else "Fill in the form"."""
    raw = (req.form or {}).get("title")
    title = one_line(str(raw)) if isinstance(raw, str) else ""
    if not title or title.replace("_", "").lower() in _GENERIC_FORM_NAMES:
        return FORM_TITLE
    return plain(field_label("", title), VIEW_TITLE)


def form_modal(req: InputRequest, form: list[dict], channel_id: str, message_ts: str) -> dict:
    """Opened by "Open form"; ``form`` is the request's fields as inputs (``blocks.forms``). Submitting
    answers the request with what was filled in."""
    if req.kind == "external-result":
        title = RESULT_LABEL
        prompt = (f"What did {inline_code(one_line(tool_name_of(req)))} return? The agent carries on with it, "
                  "and the card and the audit log name you as its source.")
    else:
        title = form_title(req)
        prompt = decision_mrkdwn(req.prompt).strip() or "_(no question text)_"
    intro = SectionBlock(block_id=ids.block_id(req.request_id, "modal-form"),
                         text=_text(truncate_mrkdwn(prompt, SECTION_TEXT)))
    return _modal(req, ids.FORM_CALLBACK_ID, title, "Send", channel_id, message_ts, [intro, *form],
                  close="Cancel")


def changes_text(req: InputRequest, edited: dict[str, Any]) -> str | None:
    """``*amount*: $40.00 → $30.00`` for every argument an approver changed; None when nothing changed."""
    before = (req.action.input if req.action else None) or {}
    shown_as = req.action.shown_as if req.action else {}
    lines = []
    for key in dict.fromkeys([*before, *edited]):
        old, new = before.get(key), edited.get(key)
        if old == new:
            continue
        name = truncate_mrkdwn(literal_mrkdwn(one_line(str(key))), FIELD_NAME_CHARS)
        lines.append(f"*{name}*: {_changed_value(old, shown_as.get(key))} → {_changed_value(new, shown_as.get(key))}")
    if not lines:
        return None
    return truncate_mrkdwn(":pencil2: Changed before approving:\n" + "\n".join(lines), SECTION_TEXT)


def _changed_value(value: Any, shown_as: str | None, limit: int = 300) -> str:
    return "_(none)_" if value is None else _input_value_text(value, shown_as, limit)
