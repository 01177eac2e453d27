"""Slack-shaped identifiers: strictly increasing message timestamps and random ids with Slack's prefixes
(``D…`` conversations, ``V…`` views)."""

from __future__ import annotations

import secrets
import string
import time


class TsClock:
    """Slack-style message timestamps: ``"<unix seconds>.<6 digits>"``, strictly increasing."""

    def __init__(self) -> None:
        self._last_us = 0

    def next(self) -> str:
        now_us = max(int(time.time() * 1_000_000), self._last_us + 1)
        self._last_us = now_us
        return f"{now_us // 1_000_000}.{now_us % 1_000_000:06d}"


def random_id(prefix: str, length: int = 10) -> str:
    alphabet = string.ascii_uppercase + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))
