"""Token rotation as Slack's guide describes it: with rotation on, an install's access token expires after
12 hours (``expires_in``) and comes with a refresh token; ``oauth.v2.access`` with ``grant_type=refresh_token``
exchanges it for a new pair, and "the refresh token is then revoked". Earlier access tokens keep working until
they expire (``token_expired`` after that, on Slack's clock ``TokenRotation.now``)."""

from __future__ import annotations

import secrets

from localslack.credentials import RefreshToken
from localslack.errors import ApiError
from localslack.models import Enterprise, Team
from localslack.workspace import Workspace


def rotate_bot_token(ws: Workspace, installation_id: str) -> tuple[str, str, int]:
    """A new expiring bot token and refresh token for a workspace or org (``E…``) the app is installed in:
    (access token, refresh token, expires_in)."""
    org = ws.enterprises.get(installation_id)
    holder: Team | Enterprise = org if org is not None else ws.team(installation_id)
    previous = holder.bot_token
    scopes = ws._scopes_of(previous) if previous else ws.app_scopes
    token = f"xoxe.xoxb-local-{installation_id}-{secrets.token_hex(6)}"
    if org is not None:
        org.bot_token = token
        teams = [t for t in ws.teams.values() if t.enterprise_id == org.id and t.bot_token == previous]
    else:
        teams = [ws.team(installation_id)]
    for team in teams:
        team.bot_token = token
        ws._register_bot_token(team, scopes)
    ws.tokens[token].expires_at = ws.rotation.now() + ws.rotation.lifetime_s
    refresh = f"xoxe-1-local-{installation_id}-{secrets.token_hex(12)}"
    ws.rotation.refresh_tokens[refresh] = RefreshToken(installation_id)
    return token, refresh, int(ws.rotation.lifetime_s)


def refresh_bot_token(ws: Workspace, refresh_token: str) -> tuple[str, str, int, str]:
    """``grant_type=refresh_token``: the refresh token is used up, the new one replaces it;
    → (access token, refresh token, expires_in, installation id)."""
    issued = ws.rotation.refresh_tokens.pop(refresh_token, None)
    if issued is None:
        raise ApiError("invalid_refresh_token")
    holder = ws.enterprises.get(issued.installation_id) or ws.teams.get(issued.installation_id)
    if holder is None or not (holder.org_install if isinstance(holder, Enterprise) else holder.installed):
        raise ApiError("invalid_refresh_token")  # uninstalled since
    return (*rotate_bot_token(ws, issued.installation_id), issued.installation_id)
