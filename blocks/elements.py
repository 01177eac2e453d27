"""Block Kit elements and composition objects as plain dicts, for the request card.

The card is built as plain Block Kit dicts, not slack_sdk models: the cards are on
every approval's path, and slack_sdk's objects cost ~5 × their dicts to build and serialise (each
``to_dict`` validates again; docs/PERFORMANCE.md, "CPU (tenth session)"). The dicts carry slack_sdk's
keys in its order (sorted), so Slack receives the same JSON byte for byte
(tests/test_blocks_cards_golden.py); the limits are kept by the truncating helpers of
:mod:`blocks.limits`, and the tests run every card through slack_sdk's validators and Slack's
documented limits (tests/blocks_validation.py). Surfaces off that path keep slack_sdk's models.
"""

from __future__ import annotations

from typing import Any

Element = dict[str, Any]  # a Block Kit block, element or composition object, as a dict


def verbatim_text(text: str) -> dict[str, Any]:
    """A ``verbatim`` mrkdwn object (:func:`blocks.text.verbatim`) as slack_sdk's ``to_dict`` gives it."""
    return {"text": text, "type": "mrkdwn", "verbatim": True}


def plain_text(text: str) -> dict[str, Any]:
    """A ``plain_text`` object as slack_sdk's ``PlainTextObject(text=…).to_dict()`` gives it."""
    return {"text": text, "type": "plain_text"}


def button(text: str, action_id: str, value: str, style: str | None = None,
           confirm: Element | None = None) -> Element:
    """A button as slack_sdk's ``ButtonElement.to_dict()`` gives it (its keys sorted; unset ones left out)."""
    element: Element = {"action_id": action_id}
    if confirm is not None:
        element["confirm"] = confirm
    if style is not None:
        element["style"] = style
    element.update(text=plain_text(text), type="button", value=value)
    return element


def confirm_dialog(title: str, text: str, confirm: str, deny: str, style: str | None = None) -> Element:
    """A confirm dialog as slack_sdk's ``ConfirmObject.to_dict()`` gives it (title, text, confirm, deny, style)."""
    dialog: Element = {"title": plain_text(title), "text": verbatim_text(text), "confirm": plain_text(confirm),
                       "deny": plain_text(deny)}
    if style is not None:
        dialog["style"] = style
    return dialog


def option(value: str, text: str, description: str | None = None) -> Element:
    """A select or radio option as slack_sdk's ``Option.to_dict()`` gives it (text, value, description)."""
    shown: Element = {"text": plain_text(text), "value": value}
    if description:
        shown["description"] = plain_text(description)
    return shown


def static_select(action_id: str, placeholder: str, options: list[Element],
                  confirm: Element | None = None) -> Element:
    element: Element = {"action_id": action_id}
    if confirm is not None:
        element["confirm"] = confirm
    element.update(options=options, placeholder=plain_text(placeholder), type="static_select")
    return element


def actions_block(block_id: str, elements: list[Element]) -> Element:
    return {"block_id": block_id, "elements": elements, "type": "actions"}
