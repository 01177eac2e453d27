"""Bolt listeners, one group per Slack feature; each group has ``register(app, deps)``.

Governance's surfaces (App Home, ``/approvers``) register with the ``Governance`` they show; they
import ``handlers.shared.governance``, which imports neither of them (tests/test_handlers_imports.py).
"""

from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from handlers import answers, assistant, commands, events, fallback, feedback, home, installs, schedules, stop
from handlers.shared.deps import SlackDeps


def register(app: AsyncApp, deps: SlackDeps) -> None:
    assistant.register(app, deps)  # before events: assistant threads' messages go through Bolt's middleware
    # Bolt asks each listener in this order until one matches. No payload matches two of those before the
    # fallback (events by their type; actions and views by their own ids), so the order decides only how many
    # are asked first: a cycle's mention, its twin message and its click come first, second, third.
    events.register(app, deps)
    answers.register(app, deps)
    stop.register(app, deps)  # Slack's stop button on an agent session
    feedback.register(app, deps)
    schedules.register(app, deps)
    installs.register(app, deps)
    if deps.governance is not None:
        home.register(app, deps.governance)
        commands.register(app, deps.governance)
    fallback.register(app, deps)
