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
    """The workspace the app is installed in, from an event envelope or an interaction payload. Only a string
    is a workspace id: any other kind in its place (junk in a signed request) names no workspace."""
    auths = body.get("authorizations")
    first = auths[0] if isinstance(auths, list) and auths and isinstance(auths[0], dict) else {}
    if isinstance(first.get("team_id"), str) and first["team_id"]:
        return first["team_id"]
    view = body.get("view") if isinstance(body.get("view"), dict) else {}
    team, user = body.get("team"), body.get("user")
    for candidate in (
        view.get("app_installed_team_id"),
        body.get("app_installed_team_id"),
        team.get("id") if isinstance(team, dict) else None,
        body.get("team_id"),
        user.get("team_id") if isinstance(user, dict) else None,
    ):
        if isinstance(candidate, str) and candidate:
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
