"""Acknowledge everything else Slack sends, so nothing 404s into Slack's retries (DESIGN §10)."""

from __future__ import annotations

import re
from typing import Any

from slack_bolt.async_app import AsyncApp

ANYTHING = re.compile(".*")


def register(app: AsyncApp) -> None:
    """Register last: Bolt runs the first listener that matches."""

    async def ack_only(ack: Any) -> None:
        await ack()

    async def ignore() -> None:
        return None

    app.action(ANYTHING)(ack_only)
    app.view(ANYTHING)(ack_only)
    app.shortcut(ANYTHING)(ack_only)
    app.event(ANYTHING)(ignore)
