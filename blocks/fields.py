"""A tool's input as the card's fields: each value shown exactly as the tool gets it (strings as written,
nested values as compact JSON, money as money), the hosts its links really go to named beneath it, and
what an approver changed ("edited from …"). Keys a model wrote are never reworded."""

from __future__ import annotations

import json
import re
from typing import Any

from blocks.forms import field_label, humanised
from blocks.limits import (
    ELLIPSIS,
    FIELD_TEXT,
    SECTION_TEXT,
    escape_mrkdwn,
    one_line,
    truncate,
    truncate_mrkdwn,
)
from blocks.messages import link_hosts, literal_mrkdwn
from bot.protocol import InputRequest

FIELD_NAME_CHARS = 200
_UNCHANGED: Any = object()  # a field an approver did not edit
LINK_NOTE_HOSTS = 5


def _value_text(value: Any, limit: int) -> str:
    """A tool-input value as mrkdwn within ``limit``, shown exactly as the tool gets it: strings as
    written, numbers and booleans as JSON, nested values as compact JSON in a code span (cut inside the
    span, so it stays closed). The hosts its URLs go to are named below it when the text does not show
    them plainly after a "://" (user info, %-escapes, look-alike letters, hidden characters, a cut)."""
    if isinstance(value, str) and not value:
        return "_(empty)_"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return truncate(str(value), limit)
    nested = not isinstance(value, str)
    raw = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str) if nested else value
    hosts = link_hosts(raw)
    shown = _shown_value(raw, limit - len(_hosts_note(list(hosts))), code=nested)
    return shown + _hosts_note(
        [h for h, plainly in hosts.items() if not plainly or not _shows_host(shown, h)]
    )


def _shown_value(raw: str, limit: int, *, code: bool) -> str:
    text = literal_mrkdwn(raw)
    if not code or "`" in text:
        return truncate_mrkdwn(text, limit)
    return f"`{truncate_mrkdwn(text, limit - 2)}`"


def _shows_host(shown: str, host: str) -> bool:
    # after a "://", so a host only inside a path or cut off by truncation does not count
    return re.search(re.escape("://" + host) + r"(?![\w.-])", shown, re.I) is not None


def _hosts_note(hosts: list[str]) -> str:
    if not hosts:
        return ""
    listed = ", ".join(hosts[:LINK_NOTE_HOSTS])
    if len(hosts) > LINK_NOTE_HOSTS:
        listed += f" and {len(hosts) - LINK_NOTE_HOSTS} more"
    return f"\n_↳ links to {escape_mrkdwn(listed)}_"


CURRENCY_SIGNS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def money_text(value: float | int, currency: str) -> str:
    """$1,234.50 · -€40.00 · 1,200.00 CHF (a sign where one is common, else the code after)."""
    sign = CURRENCY_SIGNS.get(currency)
    amount = f"{abs(value):,.2f}"
    shown = f"{sign}{amount}" if sign else f"{amount} {currency}"
    return f"-{shown}" if value < 0 else shown


EDITED_VALUE_CHARS = 300  # of the value an approver changed, shown under the one that ran


def _field_text(key: Any, value: Any, shown_as: str | None = None, was: Any = _UNCHANGED,
                label: str | None = None) -> str:
    # named by the title the tool's code gave it (``Field(title=…)``), else by its key exactly as the tool
    # gets it: a key the model wrote is never reworded (two keys must not read alike)
    shown = field_label(str(key), label) if label else str(key)
    name = truncate_mrkdwn(literal_mrkdwn(one_line(shown)), FIELD_NAME_CHARS) or "_(no name)_"
    head = f"*{name}*\n"
    if was is _UNCHANGED:
        return head + _input_value_text(value, shown_as, FIELD_TEXT - len(head))
    # an approver changed it: the value that ran, and beside it what was proposed
    before = ("\n_edited (was not set)_" if was is None
              else f"\n_edited from {_input_value_text(was, shown_as, EDITED_VALUE_CHARS)}_")
    return head + _input_value_text(value, shown_as, FIELD_TEXT - len(head) - len(before)) + before


def _input_value_text(value: Any, shown_as: str | None, limit: int) -> str:
    """A tool-input value as the card shows it: money as money ("$40.00"), anything else exactly."""
    if shown_as and shown_as.startswith("money:") and isinstance(value, int | float) and not isinstance(value, bool):
        return escape_mrkdwn(money_text(value, shown_as.removeprefix("money:")))
    return _value_text(value, limit)


def field_texts(tool_input: dict[str, Any] | None, max_fields: int, shown_as: dict[str, str] | None = None,
                 was: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> list[str]:
    """Each field as "*name*\nvalue"; with ``was`` (the proposed input of an edited call), a changed field
    also says what it was edited from."""
    items = list((tool_input or {}).items())
    shown = items if len(items) <= max_fields else items[: max_fields - 1]
    texts = [_field_text(key, value, (shown_as or {}).get(str(key)),
                         _UNCHANGED if was is None or was.get(key) == value else was.get(key),
                         (labels or {}).get(str(key)))
             for key, value in shown]
    if len(shown) < len(items):
        texts.append(f"*{ELLIPSIS}*\n_{len(items) - len(shown)} more fields not shown_")
    return texts


def form_field_titles(req: InputRequest) -> dict[str, str]:
    """A form request's field names and the labels people see (its schema's titles)."""
    properties = (req.form or {}).get("properties") or {}
    return {name: field_label(name, str(spec.get("title") or "")) if isinstance(spec, dict) else humanised(name)
            for name, spec in properties.items()}


def changes_text(req: InputRequest, edited: dict[str, Any]) -> str | None:
    """``*amount*: $40.00 → $30.00`` for every argument an approver changed; None when nothing changed."""
    before = (req.action.input if req.action else None) or {}
    shown_as = req.action.shown_as if req.action else {}
    lines = []
    for key in dict.fromkeys([*before, *edited]):
        old, new = before.get(key), edited.get(key)
        if old == new:
            continue
        name = truncate_mrkdwn(literal_mrkdwn(one_line(str(key))), FIELD_NAME_CHARS)
        lines.append(f"*{name}*: {_changed_value(old, shown_as.get(key))} → {_changed_value(new, shown_as.get(key))}")
    if not lines:
        return None
    return truncate_mrkdwn(":pencil2: Changed before approving:\n" + "\n".join(lines), SECTION_TEXT)


def _changed_value(value: Any, shown_as: str | None, limit: int = 300) -> str:
    return "_(none)_" if value is None else _input_value_text(value, shown_as, limit)
