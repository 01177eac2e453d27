"""Uninstalls and revoked tokens: Slack's ``app_uninstalled`` and ``tokens_revoked`` events.

The installation (or just its bot token) is removed from the installation store, so nothing is
posted there any more: the outbox's deliveries for that workspace find no installation and are
skipped as undeliverable (``handlers.delivery.channel``), and its requests stay open in Redis, answerable again
if the app is reinstalled. A redelivery of either event (Slack sends one again, up to minutes later, when it
did not see the 200 in time) changes nothing: it would remove an installation made again meanwhile. Without OAuth (one workspace, one token from the environment) there is no
store to clean: the event is logged so an operator knows why Slack refuses our calls.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from handlers.deps import SlackDeps

log = logging.getLogger(__name__)


def register(app: AsyncApp, deps: SlackDeps | None = None) -> None:
    async def first(body: dict[str, Any]) -> bool:
        return deps is None or await deps.first_delivery(body)

    async def on_uninstalled(body: dict[str, Any], context: dict[str, Any]) -> None:
        if await first(body):
            await forget_installation(app, context)

    async def on_tokens_revoked(body: dict[str, Any], event: dict[str, Any], context: dict[str, Any]) -> None:
        if await first(body):
            await forget_bot_token(app, event, context)

    app.event("app_uninstalled")(on_uninstalled)
    app.event("tokens_revoked")(on_tokens_revoked)


def _where(context: dict[str, Any]) -> tuple[str | None, str | None, str]:
    enterprise = context.get("enterprise_id")
    team = None if context.get("is_enterprise_install") else context.get("team_id")
    return enterprise, team, f"org {enterprise}" if team is None else f"workspace {team}"


async def forget_installation(app: AsyncApp, context: dict[str, Any]) -> None:
    enterprise, team, where = _where(context)
    store = app.installation_store
    if store is None:
        log.warning("the app was uninstalled from %s; its token no longer works (no installation store "
                    "to clean: SLACK_BOT_TOKEN comes from the environment)", where)
        return
    await store.async_delete_all(enterprise_id=enterprise, team_id=team)
    log.warning("the app was uninstalled from %s: its installation was removed; nothing more is posted "
                "there, and its open requests wait until it is installed again", where)


async def forget_bot_token(app: AsyncApp, event: dict[str, Any], context: dict[str, Any]) -> None:
    enterprise, team, where = _where(context)
    tokens = event.get("tokens") if isinstance(event.get("tokens"), dict) else {}
    store = app.installation_store
    if store is None:
        log.warning("Slack revoked tokens of %s (%s)", where, sorted(tokens))
        return
    if tokens.get("bot"):
        await store.async_delete_bot(enterprise_id=enterprise, team_id=team)
    for user_id in tokens.get("oauth") or []:
        if isinstance(user_id, str):
            await store.async_delete_installation(enterprise_id=enterprise, team_id=team, user_id=user_id)
    log.warning("Slack revoked tokens of %s (bot: %s, users: %d): removed from the installation store",
                where, bool(tokens.get("bot")), len(tokens.get("oauth") or []))
