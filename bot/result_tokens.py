"""Result tokens (DESIGN §12): how a system posts an external call's result without a Slack click.

A token is issued to one person the request's response policy admits, for one request, until it
expires: ``<payload>.<hmac>``, the payload being that person (as a ``Principal``), the request id and the
expiry, base64url-encoded, and the HMAC-SHA256 over it with a key only the bot holds. Whoever posts
with it answers *as that person*, so the response policy is asked again when the result arrives, and
the audit names them (and that it came by API). It is single-use because a request settles once: a
second post finds it settled.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from pydantic import ValidationError

from bot.deferred import DeferredModel
from bot.principals import Principal

TOKEN_TTL_S = 24 * 3600
_LABEL = b"hitl-result-token-v1"


class TokenClaims(DeferredModel):
    request_id: str
    principal: Principal
    expires_at: int  # epoch seconds


def token_key(secret: str | None) -> bytes | None:
    """The HMAC key, derived from a secret the bot already has (None: tokens are off)."""
    if not secret:
        return None
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).digest()


def issue_token(key: bytes, request_id: str, principal: Principal, *, now: float, ttl_s: int = TOKEN_TTL_S) -> str:
    claims = TokenClaims(request_id=request_id, principal=principal, expires_at=int(now) + ttl_s)
    payload = base64.urlsafe_b64encode(claims.model_dump_json().encode()).decode().rstrip("=")
    return f"{payload}.{_mac(key, payload)}"


def verify_token(key: bytes, token: str, request_id: str, *, now: float) -> TokenClaims | None:
    """The token's claims when it is ours, unexpired and for ``request_id``; None for anything else."""
    payload, dot, mac = (token or "").strip().rpartition(".")
    if not dot or not payload or len(token) > 8192 or not mac.isascii() or not payload.isascii():
        return None
    if not hmac.compare_digest(mac, _mac(key, payload)):  # constant time
        return None
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        claims = TokenClaims.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        return None
    if claims.request_id != request_id or claims.expires_at <= now:
        return None
    return claims


def _mac(key: bytes, payload: str) -> str:
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
