"""Pure functions from protocol objects (bot.protocol) to Slack Block Kit dicts, within Slack's limits.

No I/O, no Slack client, no Bolt: handlers call these and send the result.
"""

from blocks.actions import (
    ACTION_ID_PATTERN,
    APPROVERS_ACTION_PATTERN,
    APPROVERS_CALLBACK_ID,
    FREEFORM_ACTION_ID,
    FREEFORM_BLOCK_ID,
    FREEFORM_CALLBACK_ID,
    HitlAction,
    ModalMetadata,
    decode_action_id,
    decode_approvers_action_id,
    decode_approvers_submission,
    decode_modal_metadata,
    decode_option_value,
    request_id_of_block,
)
from blocks.approvers import approvers_list_text, approvers_modal
from blocks.cards import (
    card_blocks,
    render_request,
    render_requests,
    render_settled,
    render_waiting,
    replace_request_blocks,
    request_summary,
    settled_card,
)
from blocks.ephemeral import already_settled_text, not_found_text, refused_text
from blocks.home import ApproverListView, HomeRequest, home_view
from blocks.messages import Message, markdown_to_mrkdwn, reply_messages, split_message
from blocks.modals import freeform_answer, freeform_modal
from blocks.outcomes import resolution_label, settlement_label
from blocks.status import status_text
from blocks.text import mention, user_mention

__all__ = [
    "ACTION_ID_PATTERN",
    "APPROVERS_ACTION_PATTERN",
    "APPROVERS_CALLBACK_ID",
    "FREEFORM_ACTION_ID",
    "FREEFORM_BLOCK_ID",
    "FREEFORM_CALLBACK_ID",
    "ModalMetadata",
    "HitlAction",
    "HomeRequest",
    "Message",
    "ApproverListView",
    "already_settled_text",
    "approvers_list_text",
    "approvers_modal",
    "card_blocks",
    "decode_action_id",
    "decode_approvers_action_id",
    "decode_approvers_submission",
    "decode_modal_metadata",
    "decode_option_value",
    "freeform_answer",
    "freeform_modal",
    "home_view",
    "markdown_to_mrkdwn",
    "mention",
    "not_found_text",
    "refused_text",
    "render_request",
    "render_requests",
    "render_settled",
    "render_waiting",
    "replace_request_blocks",
    "reply_messages",
    "request_id_of_block",
    "request_summary",
    "settled_card",
    "resolution_label",
    "settlement_label",
    "split_message",
    "status_text",
    "user_mention",
]
