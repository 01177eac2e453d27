"""The ``/approvers`` surface: the editor modal, a read-only modal, notices, and a text summary.

``/approvers`` opens :func:`loading_modal` at once and then replaces it with :func:`approvers_modal`
(admins), :func:`approvers_list_modal` (everyone else) or a :func:`notice_modal` (a refusal, a
failure). Submitting the editor (callback ``approvers_edit``) gives one ``approvers:<list name>``
input block per approver list with a ``users`` multi-users select;
:func:`blocks.actions.decode_approvers_submission` turns its state into ``{list name: [user ids]}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
    UserMultiSelectElement,
)
from slack_sdk.models.views import View

from blocks import actions as ids
from blocks.home import EMPTY_TOOLS, ApproverListView, approvals_needed_text, approver_names, tool_line
from blocks.limits import (
    CONTEXT_TEXT,
    ELLIPSIS,
    INPUT_HINT,
    INPUT_LABEL,
    PLACEHOLDER,
    SECTION_TEXT,
    VIEW_BLOCKS,
    mrkdwn,
    one_line,
    plain,
    truncate,
)
from blocks.messages import no_pings

MODAL_TITLE = "Approver lists"
LABEL_CHARS = 150  # long labels wrap badly; the description goes into the hint
LOADING_TEXT = ":hourglass_flowing_sand: Loading…"


def _hint(policy: ApproverListView) -> str:
    parts = [approvals_needed_text(policy.required) + "."]
    description = no_pings(one_line(policy.description))  # a tool author's words: shown, never pinging
    if description:
        parts.insert(0, truncate(description, 500))
    if policy.deleted_approvers:
        n = len(policy.deleted_approvers)
        parts.append(f"{n} deactivated user{'s' if n != 1 else ''} will be removed when you save.")
    return " ".join(parts)


def _input(policy: ApproverListView) -> InputBlock:
    label = no_pings(f"{one_line(policy.list_name)} · {one_line(policy.policy_label)}")
    return InputBlock(
        block_id=ids.approvers_block_id(policy.list_name),
        label=PlainTextObject(text=plain(truncate(label, LABEL_CHARS), INPUT_LABEL)),
        hint=PlainTextObject(text=plain(_hint(policy), INPUT_HINT)),
        optional=True,  # an emptied list must be savable
        element=UserMultiSelectElement(
            action_id=ids.APPROVERS_USERS_ACTION_ID,
            placeholder=PlainTextObject(text=plain("Choose approvers", PLACEHOLDER)),
            initial_users=list(policy.approvers) or None,
        ),
    )


def approvers_modal(
    approver_lists: Sequence[ApproverListView], notes: Sequence[str] = (), *, empty_text: str = EMPTY_TOOLS
) -> dict:
    """The ``/approvers`` editor: one multi-users select per list, submit "Save"; ``notes`` under it."""
    if not approver_lists:
        return notice_modal("\n".join([empty_text, *notes]), block_id="approvers-empty")
    intro = ContextBlock(
        block_id="approvers-intro",
        elements=[
            MarkdownTextObject(text="Choose the people on each list the tools' rules read. Changes apply to new "
                                    "clicks.")
        ],
    )
    room = VIEW_BLOCKS - 1 - (1 if notes else 0)  # the intro, the notes
    if len(approver_lists) > room:
        room -= 1  # the "more" note
    blocks: list[Block] = [intro, *(_input(policy) for policy in approver_lists[:room])]
    if len(approver_lists) > room:
        blocks.append(_more_note(room, len(approver_lists), "the others keep their people."))
    if notes:
        blocks.append(_notes(notes))
    view = View(
        type="modal",
        callback_id=ids.APPROVERS_CALLBACK_ID,
        title=PlainTextObject(text=MODAL_TITLE),
        submit=PlainTextObject(text="Save"),
        close=PlainTextObject(text="Cancel"),
        blocks=blocks,
    )
    return view.to_dict()


def approvers_list_modal(
    approver_lists: Sequence[ApproverListView], notes: Sequence[str] = (), *, empty_text: str = EMPTY_TOOLS
) -> dict:
    """Who approves each tool, read-only (``/approvers`` for people who may not edit): one section per
    tool, then ``notes`` (mrkdwn lines, e.g. who can change the lists)."""
    if not approver_lists:
        return notice_modal("\n".join([empty_text, *notes]), block_id="approvers-empty")
    room = VIEW_BLOCKS - (1 if notes else 0)
    if len(approver_lists) > room:
        room -= 1  # the "more" note
    blocks: list[Block] = [
        SectionBlock(
            block_id=f"approvers-tool:{n}",
            text=MarkdownTextObject(
                text=mrkdwn(f"{tool_line(policy)}\n{approver_names(policy)}", SECTION_TEXT), verbatim=True
            ),
        )
        for n, policy in enumerate(approver_lists[:room])
    ]
    if len(approver_lists) > room:
        blocks.append(_more_note(room, len(approver_lists), "ask an admin about the others."))
    if notes:
        blocks.append(_notes(notes))
    return _closable(blocks)


def _notes(notes: Sequence[str]) -> ContextBlock:
    return ContextBlock(
        block_id="approvers-notes",
        elements=[MarkdownTextObject(text=mrkdwn("\n".join(notes), CONTEXT_TEXT), verbatim=True)],
    )


def notice_modal(text: str, *, block_id: str = "approvers-notice") -> dict:
    """A modal that only says ``text`` (mrkdwn): a refusal, a failure, an empty state."""
    section = SectionBlock(block_id=block_id, text=MarkdownTextObject(text=mrkdwn(text, SECTION_TEXT), verbatim=True))
    return _closable([section])


def loading_modal() -> dict:
    """What ``/approvers`` opens at once (a trigger_id lasts 3 s); updated when the lists are read."""
    return notice_modal(LOADING_TEXT, block_id="approvers-loading")


def _closable(blocks: Sequence[Block]) -> dict:
    view = View(type="modal", title=PlainTextObject(text=MODAL_TITLE), close=PlainTextObject(text="Close"),
                blocks=list(blocks))
    return view.to_dict()


def _more_note(shown: int, total: int, rest: str) -> ContextBlock:
    return ContextBlock(
        block_id="approvers-more",
        elements=[MarkdownTextObject(text=f"{ELLIPSIS} showing {shown} of {total} lists; {rest}")],
    )


def approvers_list_text(policies: Sequence[ApproverListView], limit: int = SECTION_TEXT) -> str:
    """mrkdwn for the ``/approvers`` ephemeral reply (fits one section: ≤3000 characters)."""
    if not policies:
        return EMPTY_TOOLS
    lines = ["*Approver lists*"]
    used = len(lines[0])
    for n, policy in enumerate(policies):
        line = mrkdwn(f"• {tool_line(policy)}: {approver_names(policy)}", 1000)
        rest = len(policies) - n - 1
        tail = 60 if rest else 0  # room for the "and N more" line
        if used + 1 + len(line) + tail > limit:
            lines.append(f"{ELLIPSIS} and {len(policies) - n} more tools — `/approvers` shows them all.")
            break
        lines.append(line)
        used += 1 + len(line)
    return "\n".join(lines)
