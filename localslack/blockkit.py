"""Block Kit checks (what Slack rejects) and lookups of interactive elements inside blocks.

Validation leans on ``slack_sdk.models`` (``Block.parse`` + ``to_dict``, which runs every nested
``JsonValidator``) and adds the rules Slack enforces that the SDK does not check (empty text, duplicate ids,
min counts, plain_text-only fields, option limits, initial options that must be among the options).
Errors are phrased like Slack's: ``"<message> [json-pointer:/blocks/0/text]"``. Each rule's source is in
docs/LOCALSLACK.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View as SdkView

MESSAGE_BLOCKS_MAX = 50
VIEW_BLOCKS_MAX = 100
VIEW_MAX_BYTES = 250_000

# Block types whose "text"/"label" must be a text object (never a bare string).
_TEXT_OBJECT_HOLDERS = {"section", "header", "button", "input", "checkboxes", "radio_buttons"}
_MIN_ONE_ELEMENT = {"actions", "context", "context_actions"}
# context_actions holds only these (docs.slack.dev reference/block-kit/blocks/context-actions-block)
_CONTEXT_ACTIONS_ELEMENTS = {"feedback_buttons", "icon_button"}

# Where Slack takes only a plain_text object (docs.slack.dev reference/block-kit/composition-objects/
# text-object: header text, button text, option text in select/overflow menus, placeholders, confirm
# dialog title/confirm/deny, option group labels; views: title/submit/close).
_PLAIN_TEXT_ONLY: dict[str, tuple[str, ...]] = {"header": ("text",), "button": ("text",)}
_MENU_TYPES = {"static_select", "multi_static_select", "overflow", "external_select", "multi_external_select"}
# Option lists: minimum 1 and maximum count per element (option-object / element reference pages).
_OPTION_COUNTS: dict[str, tuple[int, int]] = {
    "static_select": (1, 100),
    "multi_static_select": (1, 100),
    "radio_buttons": (1, 10),
    "checkboxes": (1, 10),
    "overflow": (1, 5),
}
OPTION_VALUE_MAX = 150  # option object: "value ... Maximum length for this field is 150 characters"
OPTION_TEXT_MAX = 75
OPTION_DESCRIPTION_MAX = 75
INTERACTIVE_TYPES = {
    "button",
    "static_select",
    "external_select",
    "users_select",
    "conversations_select",
    "channels_select",
    "multi_static_select",
    "multi_users_select",
    "multi_conversations_select",
    "multi_channels_select",
    "multi_external_select",
    "radio_buttons",
    "checkboxes",
    "overflow",
    "datepicker",
    "timepicker",
    "datetimepicker",
    "plain_text_input",
    "number_input",
    "email_text_input",
    "url_text_input",
    "rich_text_input",
    "feedback_buttons",
    "icon_button",
}


# Slack refuses a message whose blocks' texts add up to more than this (msg_blocks_too_long), even when
# every block is within its own limit (reference/slack-platform-study.md §1; seen on real workspaces)
MESSAGE_BLOCKS_TEXT_MAX = 12_000


def blocks_text_length(value: Any) -> int:
    """The characters of every text in these blocks (text objects, rich text, fields, nested elements)."""
    if isinstance(value, list):
        return sum(blocks_text_length(item) for item in value)
    if not isinstance(value, dict):
        return 0
    own = len(value["text"]) if isinstance(value.get("text"), str) else 0
    return own + sum(blocks_text_length(item) for key, item in value.items() if isinstance(item, dict | list))


def validate_blocks(
    blocks: Any, *, pointer: str = "/blocks", max_blocks: int = MESSAGE_BLOCKS_MAX
) -> list[str]:
    """Every reason Slack would refuse these blocks; empty when they are fine."""
    if not isinstance(blocks, list):
        return [f"must be an array [json-pointer:{pointer}]"]
    errors: list[str] = []
    if len(blocks) > max_blocks:
        errors.append(f"no more than {max_blocks} items allowed [json-pointer:{pointer}]")
    seen_block_ids: set[str] = set()
    for index, block in enumerate(blocks):
        here = f"{pointer}/{index}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            errors.append(f"missing required field: type [json-pointer:{here}]")
            continue
        errors.extend(_structural_errors(block, here))
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in seen_block_ids:
                errors.append(f"duplicate block_id: {block_id} [json-pointer:{here}/block_id]")
            seen_block_ids.add(block_id)
        errors.extend(_sdk_errors(block, here))
    return errors


def _sdk_errors(block: dict[str, Any], here: str) -> list[str]:
    try:
        parsed = Block.parse(dict(block))
    except TypeError as exc:  # a required keyword argument is missing
        missing = str(exc).rsplit(":", 1)[-1].strip().strip("'") if "missing" in str(exc) else str(exc)
        return [f"missing required field: {missing} [json-pointer:{here}]"]
    except (SlackObjectFormationError, AttributeError, ValueError, KeyError) as exc:
        return [f"{exc} [json-pointer:{here}]"]
    if parsed is None:
        return [f"unsupported type: {block['type']} [json-pointer:{here}/type]"]
    try:
        parsed.validate_json()
        parsed.to_dict()  # runs the validators of every nested element and text object
    except SlackObjectFormationError as exc:
        return [f"{exc} [json-pointer:{here}]"]
    except (TypeError, AttributeError, ValueError, KeyError) as exc:
        return [f"invalid block: {exc} [json-pointer:{here}]"]
    return []


def _structural_errors(block: dict[str, Any], here: str) -> list[str]:
    errors: list[str] = []
    block_type = block["type"]
    if block_type in _MIN_ONE_ELEMENT and isinstance(block.get("elements"), list) and not block["elements"]:
        errors.append(f"must provide at least 1 item [json-pointer:{here}/elements]")
    if block_type == "markdown" and not isinstance(block.get("text"), str):
        errors.append(f"must be a string [json-pointer:{here}/text]")  # standard Markdown, not a text object
    if block_type == "context_actions":
        for index, element in enumerate(block.get("elements") or []):
            if not isinstance(element, dict) or element.get("type") not in _CONTEXT_ACTIONS_ELEMENTS:
                errors.append(f"must be one of feedback_buttons, icon_button [json-pointer:{here}/elements/{index}]")
    seen_actions: set[str] = set()
    for node, path in _walk(block, here):
        node_type = node.get("type")
        if node_type in _TEXT_OBJECT_HOLDERS:
            for key in ("text", "label"):
                if key in node and not isinstance(node[key], dict):
                    errors.append(f"must be a text object [json-pointer:{path}/{key}]")
        if node_type in ("plain_text", "mrkdwn"):
            text = node.get("text")
            if not isinstance(text, str) or not text:
                errors.append(f"must be more than 0 characters [json-pointer:{path}/text]")
        action_id = node.get("action_id")
        if isinstance(action_id, str) and node_type in INTERACTIVE_TYPES:
            if action_id in seen_actions:
                errors.append(f"duplicate action_id: {action_id} [json-pointer:{path}/action_id]")
            seen_actions.add(action_id)
        if isinstance(node_type, str):
            errors.extend(_plain_text_errors(node, node_type, path))
            if node_type in _OPTION_COUNTS or node_type in _MENU_TYPES:
                errors.extend(_option_errors(node, node_type, path))
            if node_type in _INPUT_RULES:
                errors.extend(_INPUT_RULES[node_type](node, path))
    return errors


# Input elements' own fields (docs.slack.dev reference/block-kit/block-elements/<element>): the types
# Slack's schema takes, and the ranges each page states. slack_sdk checks none of these except the
# datetimepicker's range, and it compares before it checks the type.
PLAIN_TEXT_INPUT_MAX = 3000
DATE_TIME_MAX = 9_999_999_999  # "a UNIX timestamp in seconds … 10 digits"; slack_sdk: 0 to 9999999999


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number_input_errors(node: dict[str, Any], path: str) -> list[str]:
    """number-input-element: is_decimal_allowed Boolean, required; initial/min/max_value are Strings
    (of numbers); min_value "cannot be greater than max_value"."""
    errors: list[str] = []
    if "is_decimal_allowed" not in node:
        errors.append(f"missing required field: is_decimal_allowed [json-pointer:{path}]")
    elif not isinstance(node["is_decimal_allowed"], bool):
        errors.append(f"must be a boolean [json-pointer:{path}/is_decimal_allowed]")
    numbers: dict[str, Decimal] = {}
    for key in ("initial_value", "min_value", "max_value"):
        if key not in node:
            continue
        number = _number(node[key]) if isinstance(node[key], str) else None
        if not isinstance(node[key], str):
            errors.append(f"must be a string [json-pointer:{path}/{key}]")
        elif number is None:
            errors.append(f"must be a number [json-pointer:{path}/{key}]")
        else:
            numbers[key] = number
    if "min_value" in numbers and "max_value" in numbers and numbers["min_value"] > numbers["max_value"]:
        errors.append(f"min_value cannot be greater than max_value [json-pointer:{path}/min_value]")
    return errors


def _number(text: str) -> Decimal | None:
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _date_time_picker_errors(node: dict[str, Any], path: str) -> list[str]:
    """datetime-picker-element: initial_date_time is an Integer, epoch seconds of up to 10 digits."""
    if "initial_date_time" not in node:
        return []
    value = node["initial_date_time"]
    if not _is_int(value):
        return [f"must be an integer [json-pointer:{path}/initial_date_time]"]
    if not 0 <= value <= DATE_TIME_MAX:
        return [f"must be a UNIX timestamp in seconds (10 digits) [json-pointer:{path}/initial_date_time]"]
    return []


def _plain_text_input_errors(node: dict[str, Any], path: str) -> list[str]:
    """plain-text-input-element: initial_value String; min_length "between 0 and 3000, inclusive",
    max_length "between 1 and 3000, inclusive"; multiline Boolean."""
    errors: list[str] = []
    if "initial_value" in node and not isinstance(node["initial_value"], str):
        errors.append(f"must be a string [json-pointer:{path}/initial_value]")
    for key, low in (("min_length", 0), ("max_length", 1)):
        if key in node and not (_is_int(node[key]) and low <= node[key] <= PLAIN_TEXT_INPUT_MAX):
            errors.append(f"must be an integer from {low} to {PLAIN_TEXT_INPUT_MAX} [json-pointer:{path}/{key}]")
    if "multiline" in node and not isinstance(node["multiline"], bool):
        errors.append(f"must be a boolean [json-pointer:{path}/multiline]")
    return errors


def _multi_select_errors(node: dict[str, Any], path: str) -> list[str]:
    """multi-select-menu-element: max_selected_items Integer, "Minimum number is 1"."""
    if "max_selected_items" in node and not (_is_int(node["max_selected_items"]) and node["max_selected_items"] >= 1):
        return [f"must be an integer of at least 1 [json-pointer:{path}/max_selected_items]"]
    return []


_INPUT_RULES = {
    "number_input": _number_input_errors,
    "datetimepicker": _date_time_picker_errors,
    "plain_text_input": _plain_text_input_errors,
    "multi_static_select": _multi_select_errors,
    "multi_users_select": _multi_select_errors,
    "multi_conversations_select": _multi_select_errors,
    "multi_channels_select": _multi_select_errors,
    "multi_external_select": _multi_select_errors,
}


def _not_plain_text(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") != "plain_text"


def _plain_text_errors(node: dict[str, Any], node_type: str, path: str) -> list[str]:
    keys = list(_PLAIN_TEXT_ONLY.get(node_type, ()))
    if node_type in INTERACTIVE_TYPES:
        keys.append("placeholder")
    errors = [f"must be a plain_text text object [json-pointer:{path}/{k}]" for k in keys if _not_plain_text(node.get(k))]
    if node_type == "feedback_buttons":  # each button's text is plain_text, ≤ 75 characters
        for key in ("positive_button", "negative_button"):
            button = node.get(key)
            if not isinstance(button, dict) or _not_plain_text(button.get("text")) or not button.get("value"):
                errors.append(f"must be a button with plain_text text and a value [json-pointer:{path}/{key}]")
    confirm = node.get("confirm")
    if isinstance(confirm, dict):
        for key in ("title", "confirm", "deny"):
            if _not_plain_text(confirm.get(key)):
                errors.append(f"must be a plain_text text object [json-pointer:{path}/confirm/{key}]")
    return errors


def _option_list(node: dict[str, Any], path: str) -> list[tuple[dict[str, Any], str]]:
    found: list[tuple[dict[str, Any], str]] = []
    for index, option in enumerate(node.get("options") or []):
        if isinstance(option, dict):
            found.append((option, f"{path}/options/{index}"))
    for g, group in enumerate(node.get("option_groups") or []):
        if isinstance(group, dict):
            for index, option in enumerate(group.get("options") or []):
                if isinstance(option, dict):
                    found.append((option, f"{path}/option_groups/{g}/options/{index}"))
    return found


def _same_option(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("value") == b.get("value") and text_of(a.get("text")) == text_of(b.get("text"))


def _option_errors(node: dict[str, Any], node_type: str, path: str) -> list[str]:
    """Option objects: value <= 150, text/description <= 75, plain_text text in menus; counts per element;
    a select needs options; initial_option(s) must be among the options."""
    errors: list[str] = []
    options = _option_list(node, path)
    in_menu = node_type in _MENU_TYPES
    for option, here in options:
        value = option.get("value")
        if isinstance(value, str) and len(value) > OPTION_VALUE_MAX:
            errors.append(f"must be less than {OPTION_VALUE_MAX + 1} characters [json-pointer:{here}/value]")
        if len(text_of(option.get("text"))) > OPTION_TEXT_MAX:
            errors.append(f"must be less than {OPTION_TEXT_MAX + 1} characters [json-pointer:{here}/text/text]")
        if len(text_of(option.get("description"))) > OPTION_DESCRIPTION_MAX:
            errors.append(
                f"must be less than {OPTION_DESCRIPTION_MAX + 1} characters [json-pointer:{here}/description/text]"
            )
        if in_menu and _not_plain_text(option.get("text")):
            errors.append(f"must be a plain_text text object [json-pointer:{here}/text]")
    for g, group in enumerate(node.get("option_groups") or []):
        if isinstance(group, dict) and _not_plain_text(group.get("label")):
            errors.append(f"must be a plain_text text object [json-pointer:{path}/option_groups/{g}/label]")
    if node_type in _OPTION_COUNTS and ("options" in node or "option_groups" in node):
        low, high = _OPTION_COUNTS[node_type]
        key = "option_groups" if "option_groups" in node and "options" not in node else "options"
        listed = node.get(key)
        count = len(listed) if isinstance(listed, list) else 0
        if key == "options" and count < low:
            errors.append(f"must provide at least {low} item [json-pointer:{path}/options]")
        elif count > high:
            errors.append(f"must provide no more than {high} items [json-pointer:{path}/{key}]")
    plain = [o for o, _ in options]
    initial = node.get("initial_option")
    if isinstance(initial, dict) and plain and not any(_same_option(initial, o) for o in plain):
        errors.append(f"must match one of the options [json-pointer:{path}/initial_option]")
    for index, chosen in enumerate(node.get("initial_options") or []):
        if isinstance(chosen, dict) and plain and not any(_same_option(chosen, o) for o in plain):
            errors.append(f"must match one of the options [json-pointer:{path}/initial_options/{index}]")
    return errors


def _walk(node: Any, path: str) -> Iterator[tuple[dict[str, Any], str]]:
    if isinstance(node, dict):
        yield node, path
        for key, value in node.items():
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, f"{path}/{index}")


def validate_view(view: Any) -> list[str]:
    """Every reason Slack would refuse this view object (views.open/push/update/publish)."""
    if not isinstance(view, dict):
        return ["must be an object [json-pointer:/view]"]
    errors: list[str] = []
    view_type = view.get("type")
    if view_type not in ("modal", "home"):
        errors.append("must be one of modal, home [json-pointer:/view/type]")
    if view_type == "modal" and not view.get("title"):
        errors.append("missing required field: title [json-pointer:/view/title]")
    for key in ("title", "submit", "close"):  # modal-views reference: "plain_text only"
        if _not_plain_text(view.get(key)):
            errors.append(f"must be a plain_text text object [json-pointer:/view/{key}]")
    blocks = view.get("blocks")
    if blocks is None:
        errors.append("missing required field: blocks [json-pointer:/view/blocks]")
    else:
        errors.extend(validate_blocks(blocks, pointer="/view/blocks", max_blocks=VIEW_BLOCKS_MAX))
    if (
        view_type == "modal"
        and isinstance(blocks, list)
        and any(isinstance(b, dict) and b.get("type") == "input" for b in blocks)
        and not view.get("submit")
    ):
        errors.append("must provide submit when the view contains input blocks [json-pointer:/view/submit]")
    # The view-level limits (title <= 24, submit/close <= 24, private_metadata, callback_id) come from the SDK;
    # blocks are left out here because they were checked above with Slack-like pointers.
    meta = {k: v for k, v in view.items() if k != "blocks"}
    meta["blocks"] = [{"type": "divider"}]  # a stand-in: the SDK would otherwise report 0 blocks
    try:
        SdkView(**meta).validate_json()
        for key in ("title", "submit", "close"):
            if isinstance(view.get(key), dict):
                text = view[key].get("text")
                if not isinstance(text, str) or not text:
                    errors.append(f"must be more than 0 characters [json-pointer:/view/{key}/text]")
    except SlackObjectFormationError as exc:
        errors.append(f"{exc} [json-pointer:/view]")
    except (TypeError, AttributeError, ValueError) as exc:
        errors.append(f"invalid view: {exc} [json-pointer:/view]")
    if len(json.dumps(view)) > VIEW_MAX_BYTES:
        errors.append("view_too_large")
    return errors


def find_element(
    blocks: list[dict[str, Any]], action_id: str, block_id: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The (block, element) whose element carries ``action_id`` (optionally inside ``block_id``)."""
    for block in blocks or []:
        if block_id is not None and block.get("block_id") != block_id:
            continue
        for element in block_elements(block):
            if element.get("action_id") == action_id:
                return block, element
    return None


def block_elements(block: dict[str, Any]) -> list[dict[str, Any]]:
    """The interactive elements a block holds (actions elements, section accessory, input element)."""
    found: list[dict[str, Any]] = []
    if block.get("type") in ("actions", "context_actions"):
        found.extend(e for e in block.get("elements", []) if isinstance(e, dict))
    if isinstance(block.get("accessory"), dict):
        found.append(block["accessory"])
    if isinstance(block.get("element"), dict):
        found.append(block["element"])
    return found


def all_options(element: dict[str, Any]) -> list[dict[str, Any]]:
    options = list(element.get("options") or [])
    for group in element.get("option_groups") or []:
        options.extend(group.get("options") or [])
    return options


def find_option(element: dict[str, Any], value: str) -> dict[str, Any] | None:
    for option in all_options(element):
        if option.get("value") == value:
            return option
    return None


def selected_option_payload(option: dict[str, Any]) -> dict[str, Any]:
    """An option as Slack echoes it in selected_option(s): text (+ description) and value."""
    out: dict[str, Any] = {"text": option.get("text"), "value": option.get("value")}
    if option.get("description"):
        out["description"] = option["description"]
    return out


def state_value(element: dict[str, Any], answer: Any) -> dict[str, Any]:
    """A ``state.values[block][action]`` entry for ``element`` from a loose answer.

    ``answer`` may already be Slack's value dict (returned as is, ``type`` filled in), or a plain value:
    a string for text inputs / selects / radio buttons / datepickers, a list for multi-selects / checkboxes.
    """
    element_type = element.get("type", "plain_text_input")
    if isinstance(answer, dict):
        return {"type": element_type, **answer}
    value: dict[str, Any] = {"type": element_type}
    if element_type in ("plain_text_input", "email_text_input", "url_text_input", "number_input"):
        value["value"] = None if answer is None else str(answer)
    elif element_type in ("static_select", "radio_buttons", "external_select"):
        option = find_option(element, str(answer)) if answer is not None else None
        value["selected_option"] = selected_option_payload(option) if option else None
    elif element_type in ("multi_static_select", "checkboxes", "multi_external_select"):
        chosen = [find_option(element, str(v)) for v in (answer or [])]
        value["selected_options"] = [selected_option_payload(o) for o in chosen if o]
    elif element_type == "users_select":
        value["selected_user"] = answer
    elif element_type == "multi_users_select":
        value["selected_users"] = list(answer or [])
    elif element_type in ("conversations_select", "channels_select"):
        key = "selected_conversation" if element_type == "conversations_select" else "selected_channel"
        value[key] = answer
    elif element_type in ("multi_conversations_select", "multi_channels_select"):
        key = (
            "selected_conversations" if element_type == "multi_conversations_select" else "selected_channels"
        )
        value[key] = list(answer or [])
    elif element_type == "datepicker":
        value["selected_date"] = answer
    elif element_type == "timepicker":
        value["selected_time"] = answer
    elif element_type == "datetimepicker":
        value["selected_date_time"] = _epoch_seconds(answer)
    else:
        value["value"] = answer
    return value


def initial_state_value(element: dict[str, Any]) -> dict[str, Any] | None:
    """The state Slack reports for an untouched element that has an initial value, else None."""
    element_type = element.get("type")
    if "initial_value" in element:
        return {"type": element_type, "value": element["initial_value"]}
    if "initial_option" in element:
        return {"type": element_type, "selected_option": selected_option_payload(element["initial_option"])}
    if "initial_options" in element:
        options = [selected_option_payload(o) for o in element["initial_options"]]
        return {"type": element_type, "selected_options": options}
    if "initial_users" in element:
        return {"type": element_type, "selected_users": list(element["initial_users"])}
    if "initial_user" in element:
        return {"type": element_type, "selected_user": element["initial_user"]}
    if "initial_date" in element:
        return {"type": element_type, "selected_date": element["initial_date"]}
    if "initial_date_time" in element:
        return {"type": element_type, "selected_date_time": element["initial_date_time"]}
    return None


def _epoch_seconds(answer: Any) -> int | None:
    """A datetimepicker's answer as Slack reports it (epoch seconds): an int as is, or the browser's
    ``YYYY-MM-DDTHH:MM`` (the local workspace shows times in UTC)."""
    if answer is None or answer == "":
        return None
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        return int(answer)
    moment = datetime.fromisoformat(str(answer))
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())


def text_of(text_object: Any) -> str:
    if isinstance(text_object, dict):
        return str(text_object.get("text", ""))
    return "" if text_object is None else str(text_object)
