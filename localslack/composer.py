"""What Slack's message composer adds to a message a person types: the ``rich_text`` block (mentions,
channels, links, broadcasts as elements) and a ``client_msg_id``."""

from __future__ import annotations

import re
import secrets
import uuid
from typing import Any

_MENTION = re.compile(r"<([@#!])([^>|]+)(?:\|([^>]*))?>|<(https?://[^>|]+)(?:\|([^>]*))?>")


def rich_text_blocks(text: str) -> list[dict[str, Any]]:
    """The rich_text block Slack's composer attaches to a typed message (mentions, links, text)."""
    elements: list[dict[str, Any]] = []
    position = 0
    for match in _MENTION.finditer(text):
        if match.start() > position:
            elements.append({"type": "text", "text": text[position : match.start()]})
        sigil, target, label, url, url_label = match.groups()
        if url:
            link: dict[str, Any] = {"type": "link", "url": url}
            if url_label:
                link["text"] = url_label
            elements.append(link)
        elif sigil == "@":
            elements.append({"type": "user", "user_id": target})
        elif sigil == "#":
            elements.append({"type": "channel", "channel_id": target})
        else:
            elements.append({"type": "broadcast", "range": target})
        position = match.end()
    if position < len(text):
        elements.append({"type": "text", "text": text[position:]})
    section = {"type": "rich_text_section", "elements": elements}
    return [{"type": "rich_text", "block_id": secrets.token_hex(3), "elements": [section]}]


def new_client_msg_id() -> str:
    return str(uuid.uuid4())
