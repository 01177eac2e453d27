"""Open requests follow their approver lists.

A request says who may settle it (``InputRequest.responders``), described when it is made; the buttons
themselves always check the list as it reads at the click (``bot.governance``). When an admin changes a
list, the open requests of that workspace whose rule reads it are described again: where the answer
differs, the new description is stored on the request and an ``input.responders`` event is appended in
the same write, so the frontend updates the card and its copies and tells the people newly able to
answer (once each: ``handlers.delivery.notices``). Bounded: at most ``MAX_REFRESHED`` open requests per change.
"""

from __future__ import annotations

import logging

from bot.approval import AnswerersContext, RequestView, describe_responders
from bot.engine.parts import Parts
from bot.engine.turn_commands import AmendRequest, RequestsRead
from bot.governance import lists_read
from bot.principals import Principal
from bot.protocol import InputRespondersChanged, RequestRecord, Responders
from bot.session import SessionInfo

log = logging.getLogger(__name__)

MAX_REFRESHED = 200  # open requests looked at per list change: the workspace's pending index, oldest first


def _named(responders: Responders | None) -> list[Principal]:
    return list(responders.people) if responders is not None and responders.rule == "people" else []


def _missing(people: list[Principal], from_: list[Principal]) -> list[Principal]:
    return [p for p in people if not any(p.same_as(q) for q in from_)]


async def _describe(parts: Parts, record: RequestRecord, resource: str) -> Responders | None:
    """Who may settle ``record`` now, if its tool's rule reads ``resource``; None otherwise (or unknown)."""
    req = record.request
    tool = parts.tools.get(req.action.tool_name) if req.action else None
    if tool is None or req.action is None or req.kind not in ("tool-approval", "external-result"):
        return None
    if resource not in lists_read(tool.approval.response):
        return None
    view = RequestView(request_id=req.request_id, call_id=req.action.call_id, tool_name=tool.name,
                       tool_input=req.action.input, principal=req.principal)
    info = SessionInfo.model_validate({"id": record.session_id, "team_id": record.team_id, **record.session_info})
    return await describe_responders(tool.approval.response,
                                     AnswerersContext(request=view, session=info, policies=parts.policies))


async def refresh_responders(parts: Parts, team_id: str, resource: str, version: int) -> int:
    """Describe again who may settle each open request of ``team_id`` whose rule reads the approver list
    ``resource`` (as of policy ``version``); returns how many changed."""
    changed = 0
    for record in await parts.store.requests(RequestsRead(pending=True, team_id=team_id, limit=MAX_REFRESHED)):
        try:
            now = await _describe(parts, record, resource)
        except Exception:  # noqa: BLE001 - one request's rule failing leaves its card as it was
            log.warning("could not describe again who may settle %s", record.request_id, exc_info=True)
            continue
        before = record.request.responders
        if now is None or now == before:
            continue
        event = InputRespondersChanged(session_id=record.session_id, turn_id=record.turn_id,
                                       request_id=record.request_id,
                                       added=_missing(_named(now), _named(before)),
                                       removed=_missing(_named(before), _named(now)))
        if await parts.store.amend(AmendRequest(record, "responders", event, responders=now, version=version)):
            parts.outbox.kick(record.session_id)
            changed += 1
    return changed
