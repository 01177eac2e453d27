"""Uninstalls and revoked tokens: Slack's ``app_uninstalled`` and ``tokens_revoked`` events.

The installation (or just its bot token) is removed from the installation store, so nothing is
posted there any more: the outbox's deliveries for that workspace find no installation and are
skipped as undeliverable (``handlers.delivery.channel``). The workspace is marked uninstalled
(``bot.engine.installed``), with or without OAuth: nothing of it settles, resumes, fires or runs, and its
requests stay open in Redis, answerable again once the app is reinstalled. A new installation lifts the
mark (``store.installations``); so does any later request Slack signs for that workspace, which it sends
only to an installed app (how a one-token deployment learns it is back). A redelivery of either event
(Slack sends one again, up to minutes later, when it did not see the 200 in time) changes nothing: it
would remove an installation made again meanwhile.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.engine.installed import Installed
from handlers.identity import installation_team
from handlers.shared.deps import SlackDeps

log = logging.getLogger(__name__)

_LEAVING = frozenset({"app_uninstalled", "tokens_revoked"})


def register(app: AsyncApp, deps: SlackDeps) -> None:
    installed: Installed = deps.runtime.installed

    async def on_uninstalled(body: dict[str, Any], context: dict[str, Any]) -> None:
        async with deps.once(body) as first:
            if first:
                await forget_installation(app, context)
                await installed.uninstalled_from(await _teams(app, context))

    async def on_tokens_revoked(body: dict[str, Any], event: dict[str, Any], context: dict[str, Any]) -> None:
        async with deps.once(body) as first:
            if not first:
                return
            await forget_bot_token(app, event, context)
            tokens = event.get("tokens") if isinstance(event.get("tokens"), dict) else {}
            if tokens.get("bot"):  # without its bot token the app can do nothing there: as if uninstalled
                await installed.uninstalled_from(await _teams(app, context))

    async def back_again(body: dict[str, Any], next: Any) -> None:  # noqa: A002 - Bolt's name
        team = installation_team(body)  # the workspace as our sessions name it (not a Slack Connect guest's)
        if installed.known_uninstalled(team) and (body.get("event") or {}).get("type") not in _LEAVING:
            await installed.installed_in(str(team))  # Slack signs requests only for an installed app
        await next()

    app.middleware(back_again)
    app.event("app_uninstalled")(on_uninstalled)
    app.event("tokens_revoked")(on_tokens_revoked)


async def _teams(app: AsyncApp, context: dict[str, Any]) -> list[str]:
    """The workspaces an uninstall reaches: its own, or (org-wide) each workspace seen in the org."""
    enterprise, team, _ = _where(context)
    if team is not None:
        return [team]
    store = app.installation_store
    finder = getattr(store, "async_workspaces_of", None)
    return await finder(enterprise, org_wide=True) if finder is not None and enterprise else []


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
