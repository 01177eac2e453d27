"""The modals a card opens: "Type your own answer", "Cancel with reason", "Edit & approve" and a form
(or an external result), each carrying in its private metadata which card it answers, and the readers
of what was typed into them (``view.state.values``)."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import InputBlock, PlainTextInputElement, PlainTextObject, SectionBlock
from slack_sdk.models.views import View

from blocks import actions as ids
from blocks.controls import RESULT_LABEL
from blocks.forms import field_label
from blocks.limits import PLAIN_TEXT_INPUT, SECTION_TEXT, VIEW_TITLE, one_line, plain, truncate_mrkdwn
from blocks.messages import decision_mrkdwn
from blocks.text import inline_code, tool_name_of, verbatim
from bot.protocol import InputRequest

FREEFORM_TITLE = "Your answer"


REPLY_TITLE = "Reply instead"


def freeform_modal(req: InputRequest, channel_id: str, message_ts: str) -> dict:
    """The modal opened by "Type your own answer" (a question), or by "Reply instead" (an approval answered
    in the tool's place); submits to callback ``hitl_freeform``."""
    if req.kind == "tool-approval":
        tool = inline_code(one_line(tool_name_of(req)))
        prompt = f"Answer in {tool}’s place: it will not run, and the agent reads your words as its result."
        title, label, close = REPLY_TITLE, "Your reply", "Back"  # "Cancel" here would read as cancelling the call
    else:
        prompt = decision_mrkdwn(req.prompt).strip() or "_(no question text)_"
        title, label, close = FREEFORM_TITLE, "Your answer", "Cancel"
    blocks = [
        SectionBlock(block_id=ids.block_id(req.request_id, "modal-prompt"),
                     text=verbatim(truncate_mrkdwn(prompt, SECTION_TEXT))),
        InputBlock(
            block_id=ids.FREEFORM_BLOCK_ID,
            label=PlainTextObject(text=label),
            element=PlainTextInputElement(action_id=ids.FREEFORM_ACTION_ID, multiline=True, max_length=PLAIN_TEXT_INPUT,
                                          placeholder=PlainTextObject(text="Type your answer here")),
        ),
    ]
    return _modal(req, ids.FREEFORM_CALLBACK_ID, title, "Send", channel_id, message_ts, blocks, close=close)


def freeform_answer(state_values: dict) -> str | None:
    """The text typed into the freeform modal (``view.state.values``), stripped; None if empty."""
    return _typed_text(state_values, ids.FREEFORM_BLOCK_ID, ids.FREEFORM_ACTION_ID)


def _typed_text(state_values: dict, block_id: str, action_id: str) -> str | None:
    value = ((state_values or {}).get(block_id) or {}).get(action_id) or {}
    text = value.get("value")
    return (text.strip() or None) if isinstance(text, str) else None


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
                         text=verbatim(f"Cancel {tool}? It will not run. The agent reads your reason as yours."))
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
                         text=verbatim(f"Change what {tool} will run with, then approve. "
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
                         text=verbatim(truncate_mrkdwn(prompt, SECTION_TEXT)))
    return _modal(req, ids.FORM_CALLBACK_ID, title, "Send", channel_id, message_ts, [intro, *form],
                  close="Cancel")
