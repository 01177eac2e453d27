"""External results over HTTP (DESIGN §12): ``POST /hitl/requests/<id>/result``.

A system that ran an ``external=True`` call posts its result as JSON with ``Authorization: Bearer
<token>`` — a token the card gave to someone the response policy admits (``bot.engine.result_tokens``). The
result settles through the one settle path as that person, marked ``via: "api"``: validated against the
tool's result model, the response policy asked again, exactly once, audited. Answers are JSON with an
``error`` that says what to fix. A token that is not ours, not for this request, expired or revoked gets
the same 401 whether the request exists or not. ``DELETE`` on the same URL with a token revokes every
token of its holder issued until then.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web

from bot.engine.admission import GUEST_REFUSAL, admits
from bot.engine.installed import NOT_INSTALLED
from bot.engine.result_tokens import HOLDER_GONE, HOLDER_UNCHECKED, TokenClaims, verify_token
from bot.protocol import InputResponse, UnknownRequest
from handlers.shared.deps import RESULT_PATH, SlackDeps

log = logging.getLogger(__name__)

MAX_RESULT_BYTES = 256 * 1024
UNAUTHORIZED = "send 'Authorization: Bearer <token>' with a current token for this request"
_STATUS = {"settled": 200, "partial": 202, "invalid": 422, "stale": 409, "rejected": 403, "failed": 503,
           "forbidden": 403}


def add_routes(app: web.Application, deps: SlackDeps, key: bytes | None) -> None:
    async def post_result(request: web.Request) -> web.Response:
        return await _post_result(deps, key, request)

    async def revoke(request: web.Request) -> web.Response:
        return await _revoke(deps, key, request)

    app.router.add_post(RESULT_PATH, post_result)
    app.router.add_delete(RESULT_PATH, revoke)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message}, status=status)


async def _claims(deps: SlackDeps, key: bytes, request: web.Request) -> TokenClaims | None:
    """The claims of a current token for this request (ours, unexpired, not revoked); None for anything else."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    now = deps.runtime.settings.clock()
    claims = verify_token(key, token, request.match_info["request_id"], now=now) if scheme == "Bearer" else None
    if claims is None or deps.token_revocations is None:
        return claims
    revoked_at = await deps.token_revocations.revoked_at_ms(claims.principal.principal_id)
    return None if claims.revoked_by(revoked_at) else claims


async def _revoke(deps: SlackDeps, key: bytes | None, request: web.Request) -> web.Response:
    if key is None or deps.token_revocations is None:
        return _error(404, "result tokens are off: set SLACK_SIGNING_SECRET")
    claims = await _claims(deps, key, request)
    if claims is None:
        return _error(401, UNAUTHORIZED)
    holder = claims.principal.principal_id
    await deps.token_revocations.revoke(holder, int(deps.runtime.settings.clock() * 1000))
    if deps.audit is not None and claims.principal.team_id:  # a revocation is a decision: audited like one
        await deps.audit.append(claims.principal.team_id, "result-tokens.revoked", actor=holder, subject=holder,
                                data={"via": "api"})
    log.info("result tokens of %s revoked by their holder", holder)
    return web.json_response({"ok": True, "revoked": "every result token of this holder issued until now"})


async def _post_result(deps: SlackDeps, key: bytes | None, request: web.Request) -> web.Response:
    if key is None:
        return _error(404, "result tokens are off: set SLACK_SIGNING_SECRET")
    request_id = request.match_info["request_id"]
    claims = await _claims(deps, key, request)
    if claims is None:
        return _error(401, UNAUTHORIZED)
    raw = await request.read()
    if len(raw) > MAX_RESULT_BYTES:
        return _error(413, f"a result is at most {MAX_RESULT_BYTES} bytes")
    try:
        values: Any = json.loads(raw or b"null")
    except ValueError:
        return _error(400, "the body must be the result as a JSON object")
    if not isinstance(values, dict):
        return _error(400, "the body must be the result as a JSON object")
    try:
        record = await deps.store.get_request(request_id)
    except UnknownRequest:
        return _error(404, "no such request (it may have expired)")
    if record.request.kind != "external-result":
        return _error(404, "that request does not take a result")
    if not await deps.runtime.installed.installed(record.team_id):
        return _error(403, NOT_INSTALLED)  # it waits: the same token settles it once the app is back
    active = await deps.token_holders.active(claims.principal) if deps.token_holders is not None else None
    if active is not True:  # a deactivated account's token settles nothing; unknown fails closed
        return _error(403, HOLDER_GONE) if active is False else _error(503, HOLDER_UNCHECKED)
    if not await admits(claims.principal, record.channel.get("channel_id"), source=deps.policies, via="result"):
        # a result resumes a turn: the one admission rule, as it reads now (a guest's channel may have closed)
        return _error(403, GUEST_REFUSAL)
    response = InputResponse(request_id=request_id, values=values, principal=claims.principal, via="api")
    result = await deps.runtime.receive_answer(response, record=record)  # (the engine resumes the turn)
    if result.state == "settled":
        return web.json_response({"ok": True, "request_id": request_id})
    reason = result.reason or ("it was already settled" if result.state == "stale" else result.state)
    return _error(_STATUS.get(result.state, 400), reason)
