"""Result tokens (DESIGN §12): how a system posts an external call's result without a Slack click.

A token is issued to one person the request's response policy admits, for one request, until it
expires: ``<payload>.<hmac>``, the payload being that person (as a ``Principal``), the request id and the
expiry, base64url-encoded, and the HMAC-SHA256 over it with a key only the bot holds. Whoever posts
with it answers *as that person*, so the response policy is asked again when the result arrives, and
the audit names them (and that it came by API). It is single-use because a request settles once: a
second post finds it settled.

A token lives ``TOKEN_TTL_S`` (24 h) and is worth what its holder is: before it settles anything, the
holder must still be an active member of the workspace (``TokenHolders``: Slack's ``users.info``, each
answer kept ``HOLDER_CHECK_TTL_S``), and none of their tokens may have been revoked since it was issued
(the holder revokes their own with ``DELETE`` on the result URL; a workspace admin anyone's with
``/approvers revoke-tokens @person``). A revocation covers every token of that person issued until then.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Protocol

from pydantic import ValidationError

from bot.deferred import DeferredModel
from bot.principals import Principal

TOKEN_TTL_S = 24 * 3600
HOLDER_CHECK_TTL_S = 60.0  # how long "still an active member" is believed before Slack is asked again
HOLDER_GONE = ("The person this token was given to is no longer an active member of this workspace, so it "
               "settles nothing. Someone who is can get a new token from the card.")
HOLDER_UNCHECKED = "Whether this token's holder is still a member of the workspace can't be checked now. Try again."
_LABEL = b"hitl-result-token-v1"


class TokenClaims(DeferredModel):
    request_id: str
    principal: Principal
    expires_at: int  # epoch seconds
    issued_ms: int = 0  # epoch milliseconds; a revocation of its holder's tokens at or after this voids it

    def revoked_by(self, revoked_at_ms: int | None) -> bool:
        return revoked_at_ms is not None and self.issued_ms <= revoked_at_ms


def token_key(secret: str | None) -> bytes | None:
    """The HMAC key, derived from a secret the bot already has (None: tokens are off)."""
    if not secret:
        return None
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).digest()


def issue_token(key: bytes, request_id: str, principal: Principal, *, now: float, ttl_s: int = TOKEN_TTL_S) -> str:
    claims = TokenClaims(request_id=request_id, principal=principal, expires_at=int(now) + ttl_s,
                         issued_ms=int(now * 1000))
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


class Accounts(Protocol):
    async def account_active(self, team_id: str, user_id: str) -> bool | None:
        """Whether Slack says the account is active in that workspace; None when it cannot say."""


class Revocations(Protocol):
    """Where revocations persist (``store.token_revocations``)."""

    async def revoke(self, principal_id: str, at_ms: int) -> None: ...
    async def revoked_at_ms(self, principal_id: str) -> int | None: ...


class TokenHolders:
    """Is a token's holder still an active member of its workspace? Asked before a token settles anything;
    each answer is kept ``ttl_s`` (by the runtime's clock), so a burst of posts asks Slack once."""

    def __init__(self, accounts: Accounts | None, clock: Callable[[], float], *, ttl_s: float = HOLDER_CHECK_TTL_S):
        self._accounts = accounts
        self._clock = clock
        self._ttl_s = ttl_s
        self._known: dict[str, tuple[float, bool]] = {}

    async def active(self, principal: Principal) -> bool | None:
        """True or False; None when it cannot be told (fail closed: the caller refuses)."""
        team, user = principal.team_id, principal.slack_user_id
        if self._accounts is None or not team or not user:
            return None
        known = self._known.get(principal.principal_id)
        if known is not None and known[0] > self._clock():
            return known[1]
        active = await self._accounts.account_active(team, user)
        if active is not None:
            if len(self._known) > 10_000:  # keep it small: forget the answers that are out of date
                self._known = {k: v for k, v in self._known.items() if v[0] > self._clock()}
            self._known[principal.principal_id] = (self._clock() + self._ttl_s, active)
        return active
