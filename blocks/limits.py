"""Slack's Block Kit limits and the helpers that keep every text inside them.

Numbers come from reference/slack-platform-study.md §1 (docs.slack.dev and slack_sdk's validators).
Lengths are counted in code points, as slack_sdk counts them. Anything cut is cut *visibly*: the
text ends with "…" so a reader knows there was more.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"

# surfaces
MESSAGE_BLOCKS = 50
VIEW_BLOCKS = 100
MESSAGE_TEXT = 4000  # chat.update answers msg_too_long above this; we hold postMessage to it too
MESSAGE_BLOCKS_TEXT = 12_000  # all block texts of one message together, else msg_blocks_too_long
VIEW_TITLE = 24
VIEW_BUTTON = 24  # submit / close
PRIVATE_METADATA = 3000
CALLBACK_ID = 255

# blocks
BLOCK_ID = 255
SECTION_TEXT = 3000
SECTION_FIELDS = 10
FIELD_TEXT = 2000
HEADER_TEXT = 150
CONTEXT_ELEMENTS = 10
CONTEXT_TEXT = 3000
ACTIONS_ELEMENTS = 25
INPUT_LABEL = 2000
INPUT_HINT = 2000

# elements and composition objects
ACTION_ID = 255
BUTTON_TEXT = 75
BUTTON_VALUE = 2000
OPTION_TEXT = 75
OPTION_VALUE = 150
OPTION_DESCRIPTION = 75
RADIO_OPTIONS = 10
SELECT_OPTIONS = 100
PLACEHOLDER = 150
CONFIRM_TITLE = 100
CONFIRM_TEXT = 300
CONFIRM_BUTTON = 30
PLAIN_TEXT_INPUT = 3000  # plain_text_input min_length 0..3000, max_length 1..3000
DATE_TIME_MAX = 9_999_999_999  # datetimepicker initial_date_time: epoch seconds, at most 10 digits (slack_sdk checks 0..)

_ENTITY_TAIL = re.compile(r"&[a-z#0-9]{0,6}$")
_OPEN_TOKEN_TAIL = re.compile(r"<[^<>]*$")


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "…" when anything was dropped."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if len(text) <= limit:
        return text
    return text[: limit - 1].rstrip() + ELLIPSIS


def truncate_mrkdwn(text: str, limit: int) -> str:
    """Like :func:`truncate`, for mrkdwn: never ends inside an ``&amp;`` entity or a ``<…>`` token
    (a half token renders as garbage or breaks the message), and closes a ``` fence left open by the cut."""
    if len(text) <= limit:
        return text
    if limit < 8:
        return truncate(text, limit)
    head = _cut(text, limit - 1)
    if head.count("```") % 2 == 1:
        head = _cut(text, limit - 1 - 4)  # room for the closing fence
        if head.count("```") % 2 == 1:
            return head + ELLIPSIS + "\n```"
    return head + ELLIPSIS


def _cut(text: str, at: int) -> str:
    head = text[:at]
    if text[at : at + 1] == "`":  # never leave part of a ``` run behind
        head = head.rstrip("`")
    return _drop_partial_token(head).rstrip()


def _drop_partial_token(head: str) -> str:
    entity = _ENTITY_TAIL.search(head)
    if entity:
        head = head[: entity.start()]
    token = _OPEN_TOKEN_TAIL.search(head)
    if token:
        head = head[: token.start()]
    return head


def escape_mrkdwn(text: str) -> str:
    """Escape the three characters Slack requires escaped in mrkdwn (and nothing else)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]{1,30})>")


def escape_keeping_mentions(text: str) -> str:
    """``escape_mrkdwn`` for text that may name people: ``<@U123>`` mentions stay mentions (policies say
    who may approve), any other ``<…>`` (links, broadcasts, markup) is shown as typed."""
    parts = _USER_MENTION.split(text)  # text, user id, text, user id, …, text
    return "".join(escape_mrkdwn(part) if i % 2 == 0 else f"<@{part}>" for i, part in enumerate(parts))


def one_line(text: str) -> str:
    """Collapse whitespace and newlines, for summaries that must stay on one line."""
    return " ".join(text.split())


def non_empty(text: str, placeholder: str) -> str:
    """Slack rejects empty text objects; show ``placeholder`` instead of nothing."""
    return text if text.strip() else placeholder


def plain(text: str, limit: int) -> str:
    """Text for a ``plain_text`` object: non-empty, within ``limit``."""
    return truncate(non_empty(text, "–"), limit)


def mrkdwn(text: str, limit: int) -> str:
    """Text for a ``mrkdwn`` object: non-empty, within ``limit``."""
    return truncate_mrkdwn(non_empty(text, "–"), limit)
