"""Checks that Block Kit we produce is what Slack accepts (used by the tests of blocks/).

Two layers: slack_sdk's own models (parse + ``to_dict()`` runs every validator recursively, and
the round trip must give back the same dict, so no key is silently dropped), and the documented
limits slack_sdk does not check (empty texts, option descriptions, radio/select sizes, confirm
dialogs, duplicate ids) plus mrkdwn escaping.
"""

from __future__ import annotations

import re
from typing import Any

from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

# Every "<" in mrkdwn must open a Slack token; every "&" must start one of the three entities.
_TOKEN = re.compile(
    r"<(?:@[UW][A-Z0-9]+(?:\|[^<>]*)?|#C[A-Z0-9]+(?:\|[^<>]*)?|!date\^[^<>]+|(?:https?://|mailto:)[^<>\s|]+(?:\|[^<>]*)?)>"
)
_ENTITY = re.compile(r"&(?:amp|lt|gt);")

TEXT_LIMIT = 3000
LIMITS = {
    "header": 150,
    "button": 75,
    "option": 75,
    "option_description": 75,
    "option_value": 150,
    "button_value": 2000,
    "field": 2000,
    "placeholder": 150,
    "confirm_title": 100,
    "confirm_text": 300,
    "confirm_button": 30,
    "id": 255,
}


def assert_mrkdwn_escaped(text: str) -> None:
    stripped = re.sub(r"(?m)^>", "", _TOKEN.sub("", text))  # a line-leading ">" is a block quote
    assert "<" not in stripped and ">" not in stripped, f"unescaped < or > in mrkdwn: {text[:200]!r}"
    assert "&" not in _ENTITY.sub("", stripped), f"unescaped & in mrkdwn: {text[:200]!r}"


def _text(obj: dict, limit: int = TEXT_LIMIT, *, plain_only: bool = False) -> str:
    assert isinstance(obj, dict) and obj.get("type") in ("plain_text", "mrkdwn"), obj
    if plain_only:
        assert obj["type"] == "plain_text", obj
    text = obj.get("text")
    assert isinstance(text, str) and text.strip(), f"empty text object: {obj}"
    assert len(text) <= limit, f"text of {len(text)} > {limit}: {text[:80]!r}"
    if obj["type"] == "mrkdwn":
        assert_mrkdwn_escaped(text)
    return text


def _option(option: dict) -> None:
    _text(option["text"], LIMITS["option"])
    assert 0 < len(option["value"]) <= LIMITS["option_value"], option["value"][:80]
    if "description" in option:
        _text(option["description"], LIMITS["option_description"])


def _element(element: dict) -> None:
    kind = element["type"]
    if "action_id" in element:
        assert 0 < len(element["action_id"]) <= LIMITS["id"]
    if "placeholder" in element:
        _text(element["placeholder"], LIMITS["placeholder"], plain_only=True)
    if "confirm" in element:
        confirm = element["confirm"]
        _text(confirm["title"], LIMITS["confirm_title"], plain_only=True)
        _text(confirm["text"], LIMITS["confirm_text"])
        _text(confirm["confirm"], LIMITS["confirm_button"], plain_only=True)
        _text(confirm["deny"], LIMITS["confirm_button"], plain_only=True)
    if kind == "button":
        _text(element["text"], LIMITS["button"], plain_only=True)
        assert len(element.get("value", "")) <= LIMITS["button_value"]
        assert element.get("style") in (None, "primary", "danger")
    elif kind == "radio_buttons":
        assert 1 <= len(element["options"]) <= 10
        for option in element["options"]:
            _option(option)
    elif kind in ("static_select", "multi_static_select", "checkboxes"):
        assert 1 <= len(element["options"]) <= (10 if kind == "checkboxes" else 100)
        for option in element["options"]:
            _option(option)
        values = [o["value"] for o in element["options"]]
        for chosen in element.get("initial_options") or ([element["initial_option"]] if "initial_option" in element else []):
            assert chosen["value"] in values, "an initial option must be one of the options"
    elif kind == "number_input":
        assert isinstance(element["is_decimal_allowed"], bool)  # Slack requires it
        for key in ("initial_value", "min_value", "max_value"):
            if key in element:
                assert isinstance(element[key], str), f"{key} must be a string"
                float(element[key])
    elif kind == "plain_text_input":
        assert len(element.get("initial_value", "")) <= 3000
        assert element.get("max_length", 3000) <= 3000
    elif kind == "datepicker":
        if "initial_date" in element:
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", element["initial_date"])
    elif kind == "datetimepicker":
        if "initial_date_time" in element:
            assert isinstance(element["initial_date_time"], int)
    elif kind == "multi_users_select":
        pass
    elif kind in ("plain_text", "mrkdwn"):
        _text(element)
    else:
        raise AssertionError(f"unexpected element type {kind}")


def _block(block: dict) -> None:
    kind = block["type"]
    if "block_id" in block:
        assert 0 < len(block["block_id"]) <= LIMITS["id"]
    if kind == "section":
        assert "text" in block or "fields" in block
        if "text" in block:
            _text(block["text"])
        fields = block.get("fields", [])
        assert len(fields) <= 10
        for field in fields:
            _text(field, LIMITS["field"])
        if "accessory" in block:
            _element(block["accessory"])
    elif kind == "header":
        _text(block["text"], LIMITS["header"], plain_only=True)
    elif kind == "context":
        assert 1 <= len(block["elements"]) <= 10
        for element in block["elements"]:
            _text(element)
    elif kind == "actions":
        assert 1 <= len(block["elements"]) <= 25
        action_ids = [e["action_id"] for e in block["elements"]]
        assert len(action_ids) == len(set(action_ids)), "duplicate action_id in one actions block"
        primaries = [e for e in block["elements"] if e.get("style") == "primary"]
        assert len(primaries) <= 1, "Slack: primary on one button per set"
        for element in block["elements"]:
            _element(element)
    elif kind == "input":
        _text(block["label"], 2000, plain_only=True)
        if "hint" in block:
            _text(block["hint"], 2000, plain_only=True)
        _element(block["element"])
    elif kind == "divider":
        pass
    else:
        raise AssertionError(f"unexpected block type {kind}")


def assert_valid_blocks(blocks: list[dict[str, Any]], *, max_blocks: int = 50) -> None:
    assert 0 < len(blocks) <= max_blocks, f"{len(blocks)} blocks (max {max_blocks})"
    block_ids = [b["block_id"] for b in blocks if "block_id" in b]
    assert len(block_ids) == len(set(block_ids)), "duplicate block_id"
    for block in blocks:
        parsed = Block.parse(block)
        assert parsed is not None, block
        assert parsed.to_dict() == block, "slack_sdk round trip changed the block"
        _block(block)


def assert_valid_message(message: dict[str, Any]) -> None:
    assert set(message) == {"text", "blocks"}
    text = message["text"]
    assert isinstance(text, str) and text.strip() and len(text) <= 4000
    assert_mrkdwn_escaped(text)
    assert_valid_blocks(message["blocks"], max_blocks=50)


def assert_valid_view(view: dict[str, Any]) -> None:
    parsed = View(**view)
    assert parsed.to_dict() == view, "slack_sdk round trip changed the view"
    assert_valid_blocks(view["blocks"], max_blocks=100)
    assert 1 <= len(view.get("title", {"text": "x"})["text"]) <= 24
    if view["type"] == "home":
        assert "submit" not in view and "close" not in view
    if any(b["type"] == "input" for b in view["blocks"]):
        assert "submit" in view, "a modal with inputs needs submit"
    assert len(view.get("private_metadata", "")) <= 3000


def all_texts(node: Any) -> list[str]:
    """Every text string in a block tree (for "is it visibly truncated" checks)."""
    found: list[str] = []
    if isinstance(node, dict):
        if node.get("type") in ("plain_text", "mrkdwn") and isinstance(node.get("text"), str):
            found.append(node["text"])
        for value in node.values():
            found.extend(all_texts(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(all_texts(value))
    return found


def all_elements(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every interactive element (buttons, selects…) in the blocks."""
    found: list[dict[str, Any]] = []
    for block in blocks:
        if block["type"] == "actions":
            found.extend(block["elements"])
        if "accessory" in block:
            found.append(block["accessory"])
        if block["type"] == "input":
            found.append(block["element"])
    return found
