"""App Home: what is waiting on me, what I asked for, standing approvals ("don't ask again") I may
revoke, and (for admins) who approves each tool.

Inputs are plain pydantic models filled by handlers from the store; the view is ≤100 blocks, with a
note whenever a list is cut short. Buttons on App Home cards use the same ``hitl:`` action ids as
the cards in threads, so one handler serves both.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import Field
from slack_sdk.models.blocks import (
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
    UserMultiSelectElement,
)
from slack_sdk.models.views import View

from blocks import actions as ids
from blocks.cards import card_blocks
from blocks.deadlines import schedule_text
from blocks.limits import (
    BUTTON_VALUE,
    ELLIPSIS,
    HEADER_TEXT,
    PLACEHOLDER,
    SECTION_TEXT,
    VIEW_BLOCKS,
    escape_mrkdwn,
    mrkdwn,
    one_line,
    plain,
    truncate,
)
from blocks.schedules import schedule_line
from blocks.text import inline_code, mention, slack_date, user_mention
from bot.deferred import DeferredModel
from bot.engine.schedules import Schedule
from bot.principals import Principal
from bot.protocol import Grant, InputRequest

EMPTY_WAITING = "Nothing is waiting on you. Requests you can approve will appear here."
EMPTY_REQUESTED = "You have no open requests."
EMPTY_TOOLS = "No tool's rule reads an approver list."
NOT_ADMIN_NOTE = "Only workspace admins can change who approves."
HOME_MAX_REQUESTED = 10
HOME_MAX_TOOLS = 30
HOME_MAX_GRANTS = 15
EMPTY_GRANTS = "Nothing runs without asking. When an approver says “don’t ask again”, it shows here."
HOME_PROMPT_CHARS = 600
HOME_MAX_FIELDS = 10


class HomeRequest(DeferredModel):
    """One request as App Home lists it."""

    request: InputRequest
    status: str = "waiting"  # plain words, e.g. "waiting", "approved", "cancelled"
    can_settle: bool = True  # the viewer may press its buttons
    approvals: list[str] = Field(default_factory=list)  # user ids who approved so far (n-of-m)
    required: int = 1
    waiting_for: list[str] = Field(default_factory=list)  # user ids who can still settle it
    permalink: str | None = None  # link to the card's thread
    requester_name: str | None = None
    undeliverable: str | None = None  # why its card is not in the channel (the channel is gone): answer here
    escalated: list[Principal] = Field(default_factory=list)  # who it was escalated to (may answer too)


class ApproverListView(DeferredModel):
    """An approver list some tool's rule reads, as admins edit it."""

    list_name: str  # the list as admins see it: a tool's name for its own list ("tool:<name>")
    description: str = ""
    policy_label: str  # what reads it: "approves `refund_charge` (asks every time · approver list)"…
    approvers: list[str] = Field(default_factory=list)  # Slack user ids
    deleted_approvers: list[str] = Field(default_factory=list)  # ids of deactivated users still listed
    required: int = 1


# --- shared text ----------------------------------------------------------------------------


def approvals_needed_text(required: int) -> str:
    n = max(required, 1)
    return f"{n} approval{'s' if n != 1 else ''} needed"


def deleted_users_text(user_ids: Sequence[str]) -> str:
    return ", ".join(f"~deleted user~ {user_mention(u)}" for u in user_ids)


def approver_names(policy: ApproverListView) -> str:
    names = [user_mention(u) for u in policy.approvers]
    if policy.deleted_approvers:
        names.append(deleted_users_text(policy.deleted_approvers))
    return ", ".join(names) if names else "_no approvers set_"


def without_lists_text(rules: Sequence[tuple[str, str]]) -> str:
    """The tools whose rule reads no list, and who decides instead — so nobody looks for a list to edit."""
    if not rules:
        return ""
    shown = [f"{inline_code(name)} ({escape_mrkdwn(truncate(one_line(rule), 100))})" for name, rule in rules[:20]]
    more = f" and {len(rules) - 20} more" if len(rules) > 20 else ""
    return "No list to edit for " + ", ".join(shown) + more + "."


def tool_line(policy: ApproverListView) -> str:
    """``*`refund_charge`* list · approves `refund_charge` (asks every time) · 1 approval needed``."""
    label = escape_mrkdwn(truncate(one_line(policy.policy_label), 300))
    return f"*{inline_code(policy.list_name)}* list · {label} · {approvals_needed_text(policy.required)}"


# --- blocks ---------------------------------------------------------------------------------


def _header(key: str, text: str) -> HeaderBlock:
    return HeaderBlock(block_id=f"home:{key}:0", text=PlainTextObject(text=plain(text, HEADER_TEXT)))


def _section(key: str, text: str, n: int = 0) -> SectionBlock:
    return SectionBlock(block_id=f"home:{key}:{n}", text=MarkdownTextObject(text=mrkdwn(text, SECTION_TEXT), verbatim=True))


def _note(key: str, text: str) -> ContextBlock:
    return ContextBlock(
        block_id=f"home:{key}:0", elements=[MarkdownTextObject(text=mrkdwn(text, SECTION_TEXT), verbatim=True)]
    )


def _divider(key: str) -> DividerBlock:
    return DividerBlock(block_id=f"home:{key}:0")


def _requested_row(item: HomeRequest, n: int, now: datetime | None) -> SectionBlock:
    req = item.request
    prompt = escape_mrkdwn(truncate(one_line(req.prompt), 200))
    if req.kind == "tool-approval":
        tool = req.action.tool_name if req.action is not None else "tool"
        title = f"*Approval:* {inline_code(tool)}"
        title += f" — {prompt}" if prompt else ""
    elif req.kind == "session-limit":
        title = "*Session limit:* " + (prompt or "continue?")
    elif req.kind == "delegation":
        task = str((req.action.input or {}).get("task", "")) if req.action is not None else ""
        title = f"*Sub-agent at work:* {escape_mrkdwn(one_line(req.agent or '?'))} — " + \
            escape_mrkdwn(truncate(one_line(task), 200))
    else:
        title = "*Question:* " + (prompt or "_(no text)_")
    if req.agent and req.kind != "delegation":  # a sub-agent asked (bot.agents)
        title += f" _(from sub-agent {escape_mrkdwn(one_line(req.agent))})_"
    status = f"_Status:_ {escape_mrkdwn(truncate(one_line(item.status), 100)) or 'unknown'}"
    if item.waiting_for:
        status += " · waiting on " + ", ".join(user_mention(u) for u in item.waiting_for[:10])
    if item.required > 1 or item.approvals:
        status += f" · {len(item.approvals)} of {max(item.required, 1)} approvals"
    if item.permalink and item.permalink.startswith(("https://", "http://")):
        link = (
            item.permalink.replace("&", "&amp;").replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")
        )
        status += f" · <{link}|Open thread>"
    if now is not None and (due := schedule_text(req, now=now, escalated=bool(item.escalated))):
        status += "\n" + due
    if item.undeliverable:
        status += "\n" + undelivered_text(item.undeliverable, can_settle=False)
    return SectionBlock(
        block_id=ids.block_id(req.request_id, "hr-row", n),
        text=MarkdownTextObject(text=mrkdwn(f"{title}\n{status}", SECTION_TEXT), verbatim=True),
    )


def _tool_row(policy: ApproverListView, n: int, revision: str) -> SectionBlock:
    lines = [tool_line(policy)]
    description = one_line(policy.description)
    if description:
        lines.append(escape_mrkdwn(truncate(description, 300)))
    if policy.deleted_approvers:
        lines.append("Still listed: " + deleted_users_text(policy.deleted_approvers))
    if not policy.approvers:
        lines.append("_No approvers set._")
    return SectionBlock(
        # Slack keeps a pick on screen while the block id stays the same, even across views.publish: a new
        # revision per publish makes it show the stored list (a refused pick does not stay, looking saved)
        block_id=f"home:tool:{n}:{revision}" if revision else f"home:tool:{n}",
        text=MarkdownTextObject(text=mrkdwn("\n".join(lines), SECTION_TEXT), verbatim=True),
        accessory=UserMultiSelectElement(
            action_id=ids.approvers_action_id(policy.list_name),
            placeholder=PlainTextObject(text=plain("Choose approvers", PLACEHOLDER)),
            initial_users=list(policy.approvers) or None,
        ),
    )


def _requested_blocks(requested_by_you: Sequence[HomeRequest], now: datetime | None) -> list[Block]:
    blocks: list[Block] = [_divider("div-requested"), _header("requested", "Requested by you")]
    if not requested_by_you:
        return [*blocks, _note("requested-empty", EMPTY_REQUESTED)]
    shown = requested_by_you[:HOME_MAX_REQUESTED]
    blocks.extend(_requested_row(item, n, now) for n, item in enumerate(shown))
    if len(shown) < len(requested_by_you):
        blocks.append(
            _note(
                "requested-more",
                f"{ELLIPSIS} showing {len(shown)} of {len(requested_by_you)}. The rest are in their threads.",
            )
        )
    return blocks


def grant_text(grant: Grant) -> str:
    """``refund_charge`` for @alice in any conversation · until Dec 9 · approved by @bob"""
    tool = inline_code(grant.tool_name)
    key = f" ({inline_code(grant.approval_key)})" if grant.approval_key != grant.tool_name else ""
    if grant.scope == "requester":
        where = f"for {mention(grant.requester)} in any conversation"
    else:
        where = f"in {_conversation(grant)}, where {mention(grant.requester)} asked"
    line = f"{tool}{key} runs without asking {where}"
    if grant.expires_at is not None:
        line += f" · until {slack_date(grant.expires_at)}"
    return line + f"\n_approved by {mention(grant.granted_by)} {slack_date(grant.granted_at)}_"


def thread_url(channel: dict[str, str]) -> str | None:
    """A thread's archive link (Slack's ``/archives/<channel>/p<ts without the dot>`` form): it opens the
    thread for anyone in the channel, with no API call."""
    channel_id, ts = channel.get("channel_id"), channel.get("thread_ts")
    if not channel_id or not ts:
        return None
    return f"https://slack.com/archives/{channel_id}/p{ts.replace('.', '')}"


def _conversation(grant: Grant) -> str:
    """"one conversation", linked to its thread when the grant knows where that is (older grants do not)."""
    url = thread_url(grant.channel)
    return f"<{url}|one conversation>" if url else "one conversation"


def _grant_row(grant: Grant, n: int) -> SectionBlock:
    revoke = ButtonElement(
        text=PlainTextObject(text="Revoke"), action_id=ids.REVOKE_GRANT_ACTION_ID, value=grant.grant_id,
        style="danger",
        confirm=ConfirmObject(title=PlainTextObject(text="Revoke this approval?"),
                              text=MarkdownTextObject(text=f"{inline_code(grant.tool_name)} will ask again."),
                              confirm=PlainTextObject(text="Revoke"), deny=PlainTextObject(text="Keep it")),
    ) if len(grant.grant_id) <= BUTTON_VALUE else None
    return SectionBlock(block_id=f"home:grant:{n}", text=MarkdownTextObject(text=mrkdwn(grant_text(grant), SECTION_TEXT)),
                        accessory=revoke)


def _grant_blocks(grants: Sequence[Grant] | None) -> list[Block]:
    if grants is None:  # not shown (nobody can see any)
        return []
    blocks: list[Block] = [_divider("div-grants"), _header("grants", "Standing approvals")]
    if not grants:
        return [*blocks, _note("grants-empty", EMPTY_GRANTS)]
    shown = grants[:HOME_MAX_GRANTS]
    blocks.extend(_grant_row(g, n) for n, g in enumerate(shown))
    if len(shown) < len(grants):
        blocks.append(_note("grants-more", f"{ELLIPSIS} showing the newest {len(shown)} of {len(grants)}."))
    return blocks


def _schedule_row(schedule: Schedule, n: int) -> SectionBlock:
    remove = ButtonElement(
        text=PlainTextObject(text="Remove"), action_id=ids.REMOVE_SCHEDULE_ACTION_ID, value=schedule.schedule_id,
        confirm=ConfirmObject(title=PlainTextObject(text="Remove this schedule?"),
                              text=MarkdownTextObject(text="The agent stops doing this on its own."),
                              confirm=PlainTextObject(text="Remove"), deny=PlainTextObject(text="Keep it")),
    )
    return SectionBlock(block_id=f"home:schedule:{n}",
                        text=MarkdownTextObject(text=mrkdwn(schedule_line(schedule, with_owner=True), SECTION_TEXT),
                                                 verbatim=True),
                        accessory=remove)


def _schedule_blocks(schedules: Sequence[Schedule] | None) -> list[Block]:
    if not schedules:  # none, or not shown: the section would only say "nothing"
        return []
    shown = schedules[:HOME_MAX_GRANTS]
    blocks: list[Block] = [_divider("div-schedules"), _header("schedules", "Scheduled"),
                           *(_schedule_row(s, n) for n, s in enumerate(shown))]
    if len(shown) < len(schedules):
        blocks.append(_note("schedules-more", f"{ELLIPSIS} showing the next {len(shown)} of {len(schedules)}."))
    return blocks


def _admin_blocks(approver_lists: Sequence[ApproverListView] | None, without_lists: Sequence[tuple[str, str]],
                  revision: str = "") -> list[Block]:
    blocks: list[Block] = [_divider("div-tools"), _header("tools", "Approver lists")]
    others = [_note("tools-unlisted", mrkdwn(without_lists_text(without_lists), 3000))] if without_lists else []
    if approver_lists is None:
        return [*blocks, _note("not-admin", NOT_ADMIN_NOTE), *others]
    if not approver_lists:
        return [*blocks, _note("tools-empty", EMPTY_TOOLS), *others]
    blocks.append(_note("tools-help", "Pick people for a list and the change is saved right away."))
    shown = approver_lists[:HOME_MAX_TOOLS]
    blocks.extend(_tool_row(policy, n, revision) for n, policy in enumerate(shown))
    if len(shown) < len(approver_lists):
        blocks.append(
            _note(
                "tools-more",
                f"{ELLIPSIS} showing {len(shown)} of {len(approver_lists)} lists. "
                "Use `/approvers` to edit the others.",
            )
        )
    return [*blocks, *others]


def _waiting_card(item: HomeRequest, now: datetime | None) -> list[Block]:
    # the card's builders give dicts (blocks.elements); the Home view keeps slack_sdk's models and validators
    blocks = Block.parse_all(card_blocks(
        item.request,
        tag="hw-",
        now=now,
        escalated=item.escalated,
        interactive=item.can_settle,
        pending=True,
        requester_name=item.requester_name,
        approvals=item.approvals,
        required=item.required,
        prompt_limit=HOME_PROMPT_CHARS,
        max_fields=HOME_MAX_FIELDS,
    ))
    if not item.can_settle:
        blocks.append(
            ContextBlock(
                block_id=ids.block_id(item.request.request_id, "hw-readonly"),
                elements=[MarkdownTextObject(text="You can follow this request but not settle it.")],
            )
        )
    if item.undeliverable:
        blocks.append(
            ContextBlock(
                block_id=ids.block_id(item.request.request_id, "hw-undelivered"),
                elements=[MarkdownTextObject(text=undelivered_text(item.undeliverable, item.can_settle))],
            )
        )
    return blocks


def undelivered_text(reason: str, can_settle: bool) -> str:
    """Why a request is only here: its card could not be posted in its channel."""
    why = escape_mrkdwn(truncate(one_line(reason), 120))
    where = "Answer it here." if can_settle else "It can be answered from App Home."
    return f":warning: Its card couldn't be posted in the conversation ({why}). {where}"


def _waiting_blocks(waiting_on_you: Sequence[HomeRequest], budget: int, now: datetime | None) -> list[Block]:
    blocks: list[Block] = [_header("waiting", "Waiting on you")]
    if not waiting_on_you:
        return [*blocks, _section("waiting-empty", EMPTY_WAITING)]
    shown = 0
    for item in waiting_on_you:
        card = _waiting_card(item, now)
        separator = [_divider(f"div-w{shown}")] if shown else []
        # keep one block free for the "more" note unless this is the last request
        reserve = 0 if shown + 1 == len(waiting_on_you) else 1
        if len(blocks) + len(separator) + len(card) + reserve > budget:
            break
        blocks.extend(separator + card)
        shown += 1
    if shown < len(waiting_on_you):
        blocks.append(
            _note(
                "waiting-more",
                f"{ELLIPSIS} showing {shown} of {len(waiting_on_you)}. "
                "Answer these and the rest will appear; each is also in its thread.",
            )
        )
    return blocks


def home_view(
    user_id: str,
    waiting_on_you: Sequence[HomeRequest],
    requested_by_you: Sequence[HomeRequest],
    approver_lists: Sequence[ApproverListView] | None,
    *,
    now: datetime | None = None,
    without_lists: Sequence[tuple[str, str]] = (),
    grants: Sequence[Grant] | None = None,
    schedules: Sequence[Schedule] | None = None,
    revision: str = "",
) -> dict:
    """The App Home tab for ``user_id``. ``approver_lists`` None means the viewer is not an admin.
    ``now``: each open request also says what is due when (reminder, escalation, expiry).
    ``without_lists``: (tool, who decides) for tools whose rule reads no list. ``grants``: the standing
    approvals this viewer may revoke (theirs; every one for an admin). ``schedules``: the scheduled turns
    this viewer may remove (theirs; every one for an admin). ``revision``: different for each publish, so
    the approver selects show what is stored, not what was picked on the last view."""
    intro = _note(
        "intro", f"Hi {user_mention(user_id)} — approvals and questions from the agent, in one place."
    )
    later = (_requested_blocks(requested_by_you, now) + _grant_blocks(grants) + _schedule_blocks(schedules)
             + _admin_blocks(approver_lists, without_lists, revision))
    budget = VIEW_BLOCKS - 1 - len(later)
    blocks = [intro, *_waiting_blocks(waiting_on_you, budget, now), *later]
    return View(type="home", blocks=blocks).to_dict()


__all__ = [
    "EMPTY_REQUESTED",
    "EMPTY_TOOLS",
    "EMPTY_WAITING",
    "NOT_ADMIN_NOTE",
    "HomeRequest",
    "ApproverListView",
    "approver_names",
    "home_view",
    "tool_line",
    "without_lists_text",
]
