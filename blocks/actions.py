"""Wire ids for everything a person can press: encode when rendering, decode in handlers.

Handlers register one listener for ``ACTION_ID_PATTERN`` and call :func:`decode_action_id`.

- button:   ``hitl:<request_id>:btn:<index>``  value = option id (index = position in displayed order)
- select:   ``hitl:<request_id>:select``       option value = option id, or ``#<index>`` when the id
            is longer than Slack's 150-character option value (see :func:`decode_option_value`)
- freeform: ``hitl:<request_id>:freeform``     value = request id; opens the ``hitl_freeform`` modal
- reason:   ``hitl:<request_id>:reason``       "Cancel with reason": opens the ``hitl_reason`` modal
- edit:     ``hitl:<request_id>:edit``         "Edit & approve": opens the ``hitl_edit`` modal (a form of
            the tool's arguments); every modal's ``private_metadata`` is :class:`ModalMetadata`
- grant:    ``hitl:<request_id>:grant``        "Approve & don't ask again": a button (value = the scope) or,
            with several scopes, a select (option value = the scope)
- token:    ``hitl:<request_id>:token``        "Get a result token" (external calls): sent privately, and only
            to someone the response policy admits
- form:     ``hitl:<request_id>:form``         "Open form": opens the ``hitl_form`` modal (a "user-input"
            request's form; one input block per field, ``hitl_field:<name>``)
- approver lists: ``approvers:edit:<tool_name>`` (App Home), modal ``approvers_edit``
- standing approvals: ``grants:revoke`` (App Home), value = the grant's id

Request ids may contain ``:`` and ``.``; decoding anchors on the suffix.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import ValidationError

from blocks.limits import ACTION_ID, BLOCK_ID, BUTTON_VALUE, OPTION_VALUE, PRIVATE_METADATA
from bot.deferred import DeferredModel
from bot.protocol import InputOption, InputRequest

ACTION_PREFIX = "hitl:"
ACTION_ID_PATTERN = re.compile(r"^hitl:")

FREEFORM_CALLBACK_ID = "hitl_freeform"
FREEFORM_BLOCK_ID = "hitl_freeform_block"
FREEFORM_ACTION_ID = "hitl_freeform_text"
REASON_CALLBACK_ID = "hitl_reason"
REASON_BLOCK_ID = "hitl_reason_block"
REASON_ACTION_ID = "hitl_reason_text"
EDIT_CALLBACK_ID = "hitl_edit"
EDIT_BLOCK_PREFIX = "hitl_arg:"  # one input block per argument: hitl_arg:<field name>
FORM_CALLBACK_ID = "hitl_form"
FORM_BLOCK_PREFIX = "hitl_field:"  # one input block per form field: hitl_field:<field name>

REVOKE_GRANT_ACTION_ID = "grants:revoke"  # App Home: value = the grant's id
REMOVE_SCHEDULE_ACTION_ID = "schedules:remove"  # App Home: value = the schedule's id

APPROVERS_ACTION_PREFIX = "approvers:edit:"
APPROVERS_ACTION_PATTERN = re.compile(r"^approvers:edit:")
APPROVERS_CALLBACK_ID = "approvers_edit"
APPROVERS_BLOCK_PREFIX = "approvers:"
APPROVERS_USERS_ACTION_ID = "users"

# The longest suffix is ":freeform"; keeping request ids this short keeps every id ≤255 undamaged.
MAX_REQUEST_ID = 200
MAX_TOOL_NAME = ACTION_ID - len(APPROVERS_ACTION_PREFIX)

Control = Literal["btn", "select", "freeform", "reason", "edit", "form", "grant", "token"]
ModalControl = Literal["freeform", "reason", "edit", "form"]
MODAL_CONTROLS: tuple[ModalControl, ...] = ("freeform", "reason", "edit", "form")  # controls that open a modal

_ACTION_RE = re.compile(
    r"^hitl:(?P<request_id>.+):(?:btn:(?P<index>\d{1,4})|(?P<control>select|freeform|reason|edit|form|grant|token))$", re.S
)
_BLOCK_RE = re.compile(r"^(?P<request_id>.+):(?P<kind>[A-Za-z0-9_.-]+):(?P<n>\d+)$", re.S)
_INDEX_VALUE_RE = re.compile(r"^#(\d{1,4})$")


class HitlAction(DeferredModel):
    """A decoded ``hitl:`` action id."""

    request_id: str
    control: Control
    index: int | None = None  # buttons only: position in ``InputRequest.displayed_options()``


class ModalMetadata(DeferredModel):
    """An answer modal's ``private_metadata``: which card the answer typed into it belongs to."""

    request_id: str
    channel_id: str
    message_ts: str


def _checked_request_id(request_id: str) -> str:
    if not request_id or len(request_id) > MAX_REQUEST_ID:
        raise ValueError(f"request id must be 1..{MAX_REQUEST_ID} characters, got {len(request_id)}")
    return request_id


def button_action_id(request_id: str, index: int) -> str:
    return f"{ACTION_PREFIX}{_checked_request_id(request_id)}:btn:{index}"


def select_action_id(request_id: str) -> str:
    return f"{ACTION_PREFIX}{_checked_request_id(request_id)}:select"


def modal_action_id(request_id: str, control: ModalControl) -> str:
    """The action id of a button that opens one of a card's modals."""
    return f"{ACTION_PREFIX}{_checked_request_id(request_id)}:{control}"


def grant_action_id(request_id: str) -> str:
    return f"{ACTION_PREFIX}{_checked_request_id(request_id)}:grant"


def token_action_id(request_id: str) -> str:
    return f"{ACTION_PREFIX}{_checked_request_id(request_id)}:token"


def freeform_action_id(request_id: str) -> str:
    return modal_action_id(request_id, "freeform")


def reason_action_id(request_id: str) -> str:
    return modal_action_id(request_id, "reason")


def edit_action_id(request_id: str) -> str:
    return modal_action_id(request_id, "edit")


def decode_action_id(action_id: str) -> HitlAction | None:
    """The request and control behind an action id, or None when it is not one of ours."""
    match = _ACTION_RE.match(action_id or "")
    if match is None:
        return None
    if match["index"] is not None:
        return HitlAction(request_id=match["request_id"], control="btn", index=int(match["index"]))
    return HitlAction(request_id=match["request_id"], control=match["control"])


def option_value(index: int, option: InputOption, *, limit: int = OPTION_VALUE) -> str:
    """The ``value`` Slack sends back for an option: its id, or ``#<index>`` if the id is too long."""
    return option.id if 0 < len(option.id) <= limit else f"#{index}"


def button_value(index: int, option: InputOption) -> str:
    return option_value(index, option, limit=BUTTON_VALUE)


def decode_option_value(request: InputRequest, value: str | None) -> str | None:
    """The option id a button/select ``value`` stands for, or None if it matches no option.

    An exact option id wins; ``#<index>`` then refers to the displayed option at that index, but
    only when that option's id could not travel as itself (so ``#1`` is never misread)."""
    if value is None:
        return None
    displayed = request.displayed_options()
    if any(option.id == value for option in displayed):
        return value
    match = _INDEX_VALUE_RE.match(value)
    if match is None:
        return None
    index = int(match.group(1))
    if index >= len(displayed):
        return None
    option = displayed[index]
    return option.id if option_value(index, option) != option.id else None


def block_id(request_id: str, kind: str, n: int = 0) -> str:
    """``<request_id>:<kind>:<n>`` — unique per message (request ids differ) and per iteration
    (pending, waiting and settled cards use different kinds)."""
    value = f"{request_id}:{kind}:{n}"
    if len(value) > BLOCK_ID:
        raise ValueError("block id too long; request ids must stay short")
    return value


def request_id_of_block(block_id_value: str | None) -> str | None:
    """The request a block belongs to, from its block id (None for blocks that are not ours)."""
    match = _BLOCK_RE.match(block_id_value or "")
    return match["request_id"] if match else None


def modal_metadata(request_id: str, channel_id: str, message_ts: str) -> str:
    raw = ModalMetadata(
        request_id=request_id, channel_id=channel_id, message_ts=message_ts
    ).model_dump_json()
    if len(raw) > PRIVATE_METADATA:
        raise ValueError("modal metadata exceeds Slack's 3000-character private_metadata")
    return raw


def decode_modal_metadata(private_metadata: str | None) -> ModalMetadata | None:
    """The modal's metadata, or None if it is missing or not ours (never raises on bad input)."""
    if not private_metadata:
        return None
    try:
        return ModalMetadata.model_validate_json(private_metadata)
    except (ValidationError, json.JSONDecodeError, ValueError):
        return None


def approvers_action_id(tool_name: str) -> str:
    if not tool_name or len(tool_name) > MAX_TOOL_NAME:
        raise ValueError(f"tool name must be 1..{MAX_TOOL_NAME} characters")
    return f"{APPROVERS_ACTION_PREFIX}{tool_name}"


def decode_approvers_action_id(action_id: str) -> str | None:
    """The tool whose approver list an App Home select edits, or None."""
    if not action_id.startswith(APPROVERS_ACTION_PREFIX):
        return None
    return action_id[len(APPROVERS_ACTION_PREFIX) :] or None


def approvers_block_id(tool_name: str) -> str:
    if not tool_name or len(APPROVERS_BLOCK_PREFIX) + len(tool_name) > BLOCK_ID:
        raise ValueError("tool name too long for a block id")
    return f"{APPROVERS_BLOCK_PREFIX}{tool_name}"


def decode_approvers_submission(state_values: dict) -> dict[str, list[str]]:
    """``view.state.values`` of the ``approvers_edit`` modal → {tool_name: selected user ids}."""
    result: dict[str, list[str]] = {}
    for block, actions in (state_values or {}).items():
        if not block.startswith(APPROVERS_BLOCK_PREFIX) or not isinstance(actions, dict):
            continue
        users = (actions.get(APPROVERS_USERS_ACTION_ID) or {}).get("selected_users") or []
        result[block[len(APPROVERS_BLOCK_PREFIX) :]] = [u for u in users if isinstance(u, str)]
    return result
