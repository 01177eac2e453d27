"""The ``/approvers`` surface: a modal to edit every tool's approver list, and a text summary.

Submitting the modal (callback ``approvers_edit``) gives one ``approvers:<tool_name>`` input block
per tool with a ``users`` multi-users select; :func:`blocks.actions.decode_approvers_submission`
turns its state into ``{tool_name: [user ids]}``.
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
from blocks.home import EMPTY_TOOLS, ToolPolicyView, approvals_needed_text, approver_names, tool_line
from blocks.limits import (
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

MODAL_TITLE = "Approver lists"
LABEL_CHARS = 150  # long labels wrap badly; the description goes into the hint


def _hint(policy: ToolPolicyView) -> str:
    parts = [approvals_needed_text(policy.required) + "."]
    description = one_line(policy.description)
    if description:
        parts.insert(0, truncate(description, 500))
    if policy.deleted_approvers:
        n = len(policy.deleted_approvers)
        parts.append(f"{n} deactivated user{'s' if n != 1 else ''} will be removed when you save.")
    return " ".join(parts)


def _input(policy: ToolPolicyView) -> InputBlock:
    label = f"{one_line(policy.tool_name)} · {one_line(policy.policy_label)}"
    return InputBlock(
        block_id=ids.approvers_block_id(policy.tool_name),
        label=PlainTextObject(text=plain(truncate(label, LABEL_CHARS), INPUT_LABEL)),
        hint=PlainTextObject(text=plain(_hint(policy), INPUT_HINT)),
        optional=True,  # an emptied list must be savable
        element=UserMultiSelectElement(
            action_id=ids.APPROVERS_USERS_ACTION_ID,
            placeholder=PlainTextObject(text=plain("Choose approvers", PLACEHOLDER)),
            initial_users=list(policy.approvers) or None,
        ),
    )


def approvers_modal(tool_policies: Sequence[ToolPolicyView]) -> dict:
    """The ``/approvers`` modal: one multi-users select per tool, submit "Save"."""
    if not tool_policies:
        view = View(
            type="modal",
            callback_id=ids.APPROVERS_CALLBACK_ID,
            title=PlainTextObject(text=MODAL_TITLE),
            close=PlainTextObject(text="Close"),
            blocks=[SectionBlock(block_id="approvers-empty", text=MarkdownTextObject(text=EMPTY_TOOLS))],
        )
        return view.to_dict()
    intro = ContextBlock(
        block_id="approvers-intro",
        elements=[
            MarkdownTextObject(text="Choose who may approve each tool's calls. Changes apply to new clicks.")
        ],
    )
    room = VIEW_BLOCKS - 1  # the intro
    if len(tool_policies) > room:
        room -= 1  # the "more" note
    blocks: list[Block] = [intro, *(_input(policy) for policy in tool_policies[:room])]
    if len(tool_policies) > room:
        blocks.append(
            ContextBlock(
                block_id="approvers-more",
                elements=[
                    MarkdownTextObject(
                        text=f"{ELLIPSIS} showing {room} of {len(tool_policies)} tools; "
                        "the others keep their lists."
                    )
                ],
            )
        )
    view = View(
        type="modal",
        callback_id=ids.APPROVERS_CALLBACK_ID,
        title=PlainTextObject(text=MODAL_TITLE),
        submit=PlainTextObject(text="Save"),
        close=PlainTextObject(text="Cancel"),
        blocks=blocks,
    )
    return view.to_dict()


def approvers_list_text(policies: Sequence[ToolPolicyView], limit: int = SECTION_TEXT) -> str:
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
            lines.append(f"{ELLIPSIS} and {len(policies) - n} more tools — see the App Home.")
            break
        lines.append(line)
        used += 1 + len(line)
    return "\n".join(lines)
