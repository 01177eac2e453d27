"""Bolt listeners, one group per Slack feature; each group has ``register(app, deps)``."""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from handlers import answers, events, fallback, installs
from handlers.deps import SlackDeps


def register(app: AsyncApp, deps: SlackDeps) -> None:
    events.register(app, deps)
    answers.register(app, deps)
    installs.register(app)
    if deps.governance is not None:
        deps.governance.register(app)
    fallback.register(app)
