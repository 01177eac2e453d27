"""Principals from verified Slack payloads (DESIGN §5).

The principal's team is the *installation's* workspace (``authorizations[0]`` for events, the
installed team for interactions), so one person keeps one principal across Slack Connect and
Enterprise Grid; the person's own workspace goes in ``attributes["user_team_id"]`` and the
installation's Enterprise Grid org, when there is one, in ``attributes["enterprise_id"]``.
"""

from __future__ import annotations

from typing import Any

from bot.principals import Principal, slack_user


def installation_team(body: dict[str, Any]) -> str | None:
    """The workspace the app is installed in, from an event envelope or an interaction payload."""
    auths = body.get("authorizations") or []
    if auths and auths[0].get("team_id"):
        return auths[0]["team_id"]
    view = body.get("view") or {}
    for candidate in (
        view.get("app_installed_team_id"),
        body.get("app_installed_team_id"),
        (body.get("team") or {}).get("id") if isinstance(body.get("team"), dict) else None,
        body.get("team_id"),
        (body.get("user") or {}).get("team_id") if isinstance(body.get("user"), dict) else None,
    ):
        if candidate:
            return candidate
    return None


def installation_enterprise(body: dict[str, Any]) -> str | None:
    """The Enterprise Grid org the app is installed in (or on), from the verified payload; None outside Grid."""
    auths = body.get("authorizations") or []
    if auths and isinstance(auths[0], dict) and auths[0].get("enterprise_id"):
        return auths[0]["enterprise_id"]
    enterprise = body.get("enterprise")
    team = body.get("team")
    for candidate in (
        enterprise.get("id") if isinstance(enterprise, dict) else None,
        body.get("enterprise_id"),
        team.get("enterprise_id") if isinstance(team, dict) else None,
    ):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None


def _org(body: dict[str, Any]) -> dict[str, str]:
    enterprise = installation_enterprise(body)
    return {"enterprise_id": enterprise} if enterprise else {}


def event_principal(body: dict[str, Any], event: dict[str, Any]) -> Principal | None:
    """Who wrote a message event; None when it has no human author."""
    user_id = event.get("user")
    team = installation_team(body)
    if not user_id or not team:
        return None
    user_team = event.get("user_team") or event.get("team") or team
    return slack_user(team, user_id, user_team_id=user_team, **_org(body))


def interaction_principal(body: dict[str, Any]) -> Principal | None:
    """Who clicked or submitted (block_actions, view_submission)."""
    user = body.get("user") or {}
    team = installation_team(body)
    if not user.get("id") or not team:
        return None
    return slack_user(team, user["id"], user_team_id=user.get("team_id") or team, user_name=user.get("username"),
                      **_org(body))


def command_principal(body: dict[str, Any]) -> Principal | None:
    """Who ran a slash command."""
    team = body.get("team_id")
    user_id = body.get("user_id")
    if not team or not user_id:
        return None
    return slack_user(team, user_id, user_team_id=body.get("user_team_id") or team, **_org(body))
