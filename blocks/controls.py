"""The interactive part of a pending card: Approve / Cancel buttons (with a confirm for dangerous tools),
Edit & approve, Reply instead (an answer in the tool's place), Cancel with reason, the question's select menu, radio buttons or buttons, "Type your own
answer", and the buttons of forms and external results. Labels a model wrote go through
:func:`blocks.messages.decision_plain`. Built as Block Kit dicts, as the rest of the card
(:mod:`blocks.elements` says why)."""

from __future__ import annotations

from blocks import actions as ids
from blocks.elements import Element, actions_block, button, confirm_dialog, option, static_select
from blocks.grants import grant_control
from blocks.limits import (
    ACTIONS_ELEMENTS,
    BUTTON_TEXT,
    CONFIRM_BUTTON,
    CONFIRM_TEXT,
    CONFIRM_TITLE,
    OPTION_DESCRIPTION,
    OPTION_TEXT,
    PLACEHOLDER,
    SELECT_OPTIONS,
    one_line,
    plain,
    truncate,
    truncate_mrkdwn,
)
from blocks.messages import decision_plain
from blocks.text import inline_code, request_context, tool_name_of
from bot.protocol import (
    APPROVE,
    CANCEL,
    CONTINUE,
    STOP,
    InputOption,
    InputRequest,
    approval_options,
    session_limit_options,
)

RADIO_MAX_OPTIONS = 5  # style="radio" takes up to this many options; more go into a select menu
FREEFORM_LABEL = "Type your own answer"


def _options_of(req: InputRequest) -> list[InputOption]:
    displayed = req.displayed_options()
    if displayed:
        return displayed
    if req.kind == "tool-approval":
        return approval_options()
    if req.kind == "session-limit":
        return session_limit_options()
    return []


def _button_style(req: InputRequest, option: InputOption) -> str | None:
    if option.id in (APPROVE, CONTINUE) and req.kind in ("tool-approval", "session-limit"):
        return "primary"
    if option.id == STOP and req.kind == "session-limit":
        return "danger"
    return option.style


def _confirm_for(req: InputRequest) -> Element:
    tool = one_line(tool_name_of(req))
    return confirm_dialog(
        plain(f"Run {tool}?", CONFIRM_TITLE),
        truncate_mrkdwn(f"{inline_code(tool)} is marked as dangerous. It will run with the input shown on the card.",
                        CONFIRM_TEXT),
        plain("Run it", CONFIRM_BUTTON),
        plain("Not yet", CONFIRM_BUTTON),
        style="danger",
    )


def _buttons(req: InputRequest, options: list[InputOption]) -> list[Element]:
    buttons: list[Element] = []
    primary_used = False
    for index, choice in enumerate(options[:ACTIONS_ELEMENTS]):
        style = _button_style(req, choice)
        if style == "primary":  # Slack: primary "should only be used for one button within a set"
            style = None if primary_used else style
            primary_used = True
        confirm = _confirm_for(req) if req.dangerous and choice.id == APPROVE else None
        buttons.append(button(plain(decision_plain(choice.label, BUTTON_TEXT), BUTTON_TEXT),
                              ids.button_action_id(req.request_id, index), ids.button_value(index, choice),
                              style, confirm))
    return buttons


def _choice_options(options: list[InputOption]) -> list[Element]:
    result = []
    for index, choice in enumerate(options[:SELECT_OPTIONS]):
        description = decision_plain(choice.description or "", OPTION_DESCRIPTION)
        result.append(option(ids.option_value(index, choice),
                             plain(decision_plain(choice.label, OPTION_TEXT), OPTION_TEXT),
                             truncate(description, OPTION_DESCRIPTION) if description else None))
    return result


def _freeform_button(req: InputRequest, *, primary: bool) -> Element:
    return button(FREEFORM_LABEL, ids.freeform_action_id(req.request_id), req.request_id,
                  "primary" if primary else None)


EDIT_LABEL = "Edit & approve"
REASON_LABEL = "Cancel with reason"


def _modal_button(req: InputRequest, label: str, action_id: str) -> Element:
    return button(label, action_id, req.request_id)


REPLY_LABEL = "Reply instead"


def reply_note(req: InputRequest) -> str:
    """What "Reply instead" does, under the buttons of an approval that may be answered in the tool's place."""
    tool = inline_code(one_line(tool_name_of(req)))
    return f":speech_balloon: *{REPLY_LABEL}*: your words go to the agent as {tool}’s result, and it does not run."


def no_cancel_note(req: InputRequest) -> str:
    """Said where Cancel would be, when the agent takes no cancel for the call (its framework's setup)."""
    tool = inline_code(one_line(tool_name_of(req)))
    return f"This agent takes no cancel for {tool}: approve it, or stop the agent."


def no_approve_note(req: InputRequest) -> str:
    """Said where Approve would be, when the agent takes no approval of the call (its framework's setup)."""
    tool = inline_code(one_line(tool_name_of(req)))
    ways = [way for way, offered in (("reply instead", req.allow_free_text), ("cancel it", _offers(req, CANCEL)))
            if offered]
    return f"This agent does not let {tool} run from here: {' or '.join(ways) or 'stop the agent'}."


def fixed_input_note(req: InputRequest) -> str:
    """Said where "Edit & approve" would be, when the agent takes the call only as proposed."""
    tool = inline_code(one_line(tool_name_of(req)))
    return f"Approve runs {tool} as proposed: this agent takes no changes to its input."


def _offers(req: InputRequest, option_id: str) -> bool:
    """Whether the approval offers this option (one without options of its own offers both)."""
    return not req.options or req.option(option_id) is not None


def _cancellable(req: InputRequest, options: list[InputOption]) -> bool:
    return any(o.id == CANCEL for o in options)


def _approval_controls(req: InputRequest, options: list[InputOption]) -> list[Element]:
    """Approve, [Edit & approve], [don't ask again], [Reply instead], Cancel, Cancel with reason (the modal
    ones open modals); only what the request offers."""
    buttons = _buttons(req, options)
    if req.kind != "tool-approval":
        return buttons
    extras: list[Element] = []
    if req.editable:
        extras.append(_modal_button(req, EDIT_LABEL, ids.edit_action_id(req.request_id)))
    if req.grants:
        extras.append(grant_control(req))
    if req.allow_free_text:  # the person answers in the tool's place (the typed-answer modal)
        extras.append(_modal_button(req, REPLY_LABEL, ids.freeform_action_id(req.request_id)))
    at = 1 if options and options[0].id == APPROVE else 0  # after Approve, before Cancel
    buttons[at:at] = extras
    if _cancellable(req, options):
        buttons.append(_modal_button(req, REASON_LABEL, ids.reason_action_id(req.request_id)))
    return buttons


def _approval_notes(req: InputRequest, options: list[InputOption], tag: str) -> list[Element]:
    """Plain lines under an approval's buttons for what differs from the usual card."""
    if req.kind != "tool-approval":
        return []
    notes = []
    if req.allow_free_text:
        notes.append(request_context(req.request_id, f"{tag}replynote", reply_note(req)))
    if not _offers(req, APPROVE):
        notes.append(request_context(req.request_id, f"{tag}noapprove", no_approve_note(req)))
        return notes
    if req.fixed_input and not req.editable:
        notes.append(request_context(req.request_id, f"{tag}noedit", fixed_input_note(req)))
    if not _cancellable(req, options):
        notes.append(request_context(req.request_id, f"{tag}nocancel", no_cancel_note(req)))
    return notes


FORM_LABEL = "Open form"
FORM_ONLY_NOTE = "Typed replies don’t answer a form: use *Open form*."


def _form_controls(req: InputRequest, tag: str) -> list[Element]:
    form = button(FORM_LABEL, ids.modal_action_id(req.request_id, "form"), req.request_id, "primary")
    return [actions_block(ids.block_id(req.request_id, f"{tag}actions"), [form]),
            request_context(req.request_id, f"{tag}formnote", FORM_ONLY_NOTE)]


RESULT_LABEL = "Submit result"
TOKEN_LABEL = "Get a result token"
EXTERNAL_NOTE = ("Run it yourself, then *Submit result* with what it returned. A system can post the result "
                 "instead: *Get a result token*.")


def _external_controls(req: InputRequest, tag: str) -> list[Element]:
    """Submit result (a form of the tool's result model), Get a result token, Cancel, Cancel with reason."""
    rid = req.request_id
    submit = button(RESULT_LABEL, ids.modal_action_id(rid, "form"), rid, "primary")
    token = button(TOKEN_LABEL, ids.token_action_id(rid), rid)
    cancel = [o for o in req.displayed_options() if o.id == CANCEL]
    elements = [submit, token, *_buttons(req, cancel), _modal_button(req, REASON_LABEL, ids.reason_action_id(rid))]
    return [actions_block(ids.block_id(rid, f"{tag}actions"), elements),
            request_context(rid, f"{tag}extnote", EXTERNAL_NOTE)]


def controls(req: InputRequest, tag: str) -> list[Element]:
    options = _options_of(req)
    actions_id = ids.block_id(req.request_id, f"{tag}actions")
    if req.kind in ("tool-approval", "session-limit"):
        return [actions_block(actions_id, _approval_controls(req, options)), *_approval_notes(req, options, tag)]
    if req.kind == "user-input":
        return _form_controls(req, tag)
    if req.kind == "external-result":
        return _external_controls(req, tag)
    if req.kind == "delegation":  # the sub-agent answers it; people may only stop it
        return [actions_block(actions_id, _buttons(req, options))]
    elements: list[Element] = []
    if options and req.style == "buttons" and len(options) < ACTIONS_ELEMENTS:
        elements.extend(_buttons(req, options))
        if req.allow_free_text:
            elements.append(_freeform_button(req, primary=False))
    elif options:
        choices = _choice_options(options)
        if req.style == "radio" and len(options) <= RADIO_MAX_OPTIONS:
            elements.append({"action_id": ids.select_action_id(req.request_id), "options": choices,
                             "type": "radio_buttons"})
        else:
            elements.append(static_select(ids.select_action_id(req.request_id),
                                          plain("Choose an answer", PLACEHOLDER), choices))
        if req.allow_free_text:
            elements.append(_freeform_button(req, primary=False))
    else:  # an open question: typing is the only way to answer
        elements.append(_freeform_button(req, primary=True))
    blocks = [actions_block(actions_id, elements)]
    if len(options) > SELECT_OPTIONS:
        blocks.append(
            request_context(
                req.request_id,
                f"{tag}more",
                f"Showing the first {SELECT_OPTIONS} of {len(options)} options. "
                "To pick another, reply in the thread with its number.",
            )
        )
    return blocks
