"""Messages in (DESIGN §8): record durably first, then answer, steer, queue or start a turn.

A message is written to the session's queue (once per message id) before anyone acknowledges it,
so a process that dies right after the ack loses nothing: the sweep drives the session. Then the
message is tried as a typed answer to the first open request; if it answers nothing it stays
queued and the turn loop takes it (steering, a new turn, or waiting for the turn to end).
"""

from __future__ import annotations

import secrets
from typing import Any

from bot.engine.inputs import first_open_input, is_bare_answer, match_text
from bot.engine.parts import Parts
from bot.engine.settle import AnswerResult, Settler
from bot.engine.turn_commands import RecordMessage, RequestsRead, SessionRead, TakeMessage
from bot.principals import Principal
from bot.protocol import HeldLease, RequestRecord, SessionSnapshot, utcnow
from bot.session import SessionRef
from bot.state import SessionState, state_of


def new_message(ref: SessionRef, principal: Principal | None, text: str, message_id: str | None,
                *, automated: bool = False) -> dict[str, Any]:
    message = {
        "id": message_id or secrets.token_hex(8),
        "principal": principal.model_dump(mode="json") if principal else None,
        "text": text,
        "ref": ref.model_dump(mode="json"),
        "at": utcnow().isoformat(),
    }
    if automated:  # sent by the app itself (a schedule) on behalf of ``principal``
        message["automated"] = True
    return message


class QueuedMessage(dict[str, Any]):
    """A message as it was queued (the dict, stored as is), and ``seen``: its session's inbox and state read
    in the same round trip as its record, at least as new as the message. Trying it as an answer reads
    them from here; a turn that changes the state after it is still refused by the settle script's own
    checks (a settled request, a closed turn), as a read a moment later would be."""

    def __init__(self, message: dict[str, Any], session_id: str, seen: SessionSnapshot,
                 held: HeldLease | None = None):
        super().__init__(message)
        self.session_id = session_id
        self.seen = seen
        self.held = held  # the turn lease its record took for this process's drive (``Intake.record(lease=True)``)

    @staticmethod
    def seen_in(message: dict[str, Any], session_id: str) -> SessionSnapshot | None:
        """What was read with ``message``'s record in ``session_id``, if it was recorded here."""
        if isinstance(message, QueuedMessage) and message.session_id == session_id:
            return message.seen
        return None

    @staticmethod
    def held_in(message: dict[str, Any], session_id: str) -> HeldLease | None:
        """The turn lease ``message``'s record took in ``session_id``, if it took one."""
        return message.held if isinstance(message, QueuedMessage) and message.session_id == session_id else None


class Intake:
    def __init__(self, parts: Parts, settler: Settler):
        self.p = parts
        self.settler = settler

    async def record(
        self, ref: SessionRef, principal: Principal | None, text: str, *, message_id: str | None = None,
        automated: bool = False, lease: bool = False,
    ) -> dict[str, Any] | None:
        """Queue the message durably; None when this message id was seen before (Slack repeats some).
        ``lease``: this process drives the session next (``Runtime.process_message``): the record takes the
        turn lease too when it is free, with what the drive starts from (``QueuedMessage.held``)."""
        message = new_message(ref, principal, text, message_id, automated=automated)
        recorded = await self.p.store.record_message(RecordMessage(ref.session_id, message, message_id,
                                                                   "lease" if lease else "read"))
        return QueuedMessage(message, ref.session_id, *recorded) if recorded is not None else None

    async def nothing_waiting(self, session_id: str, message: dict[str, Any]) -> bool:
        """A bare answer ("approve", "cancel: …") typed while no turn runs and nothing else is queued: it
        answers nothing and asks the model nothing (it would only get help text), so it leaves the queue
        here and the person is told (``PostResult("nothing waiting")``). False: it goes on as a message."""
        if message.get("automated") or not is_bare_answer(str(message.get("text") or "")):
            return False
        seen = QueuedMessage.seen_in(message, session_id)
        if seen is None:
            seen = await self.p.store.read(SessionRead(session_id))
        if (seen_state := state_of(seen)) is not None and seen_state.turn is not None:
            return False  # a turn is running: its card may be on the way, the message steers or waits
        if [m.get("id") for m in seen.inbox] != [message.get("id")]:
            return False  # something asked before it is still queued: it may bring the card it answers
        return await self.p.store.take_message(TakeMessage(session_id, message))  # False: another worker took it

    async def try_answer(
        self, session_id: str, message: dict[str, Any], state: SessionState | None = None, *,
        queued_in: str | None = None,
    ) -> AnswerResult | None:
        """Answer the first open request with this queued message, if it is an answer; the message then
        leaves the queue (``queued_in``'s, when it is another session's). None: it answers nothing and
        stays queued. While the first open request is a delegation, the sub-agent's requests (shown in
        the same thread) are the ones a typed reply answers."""
        if state is None:
            seen = QueuedMessage.seen_in(message, session_id)
            if seen is None:
                seen = await self.p.store.read(SessionRead(session_id, state_only=True))
            state = state_of(seen)
        if state is None or state.turn is None:
            return None
        turn = state.turn
        records = [r for r in await self.p.store.requests(RequestsRead(turn.open_request_ids())) if r.status == "open"]
        first = first_open_input([r.request for r in records])
        if first is None:
            return None
        if first.kind == "delegation" and first.child_session_id:
            return await self.try_answer(first.child_session_id, message, queued_in=queued_in or session_id)
        principal = Principal.model_validate(message["principal"]) if message.get("principal") else None
        response = match_text(first, message["text"], principal)
        if response is None:
            return None
        is_owner = turn.owner is None or turn.owner.same_as(principal)
        if not is_owner and response.option_id is None:
            return None  # someone else's words are a message of theirs, not an answer to this turn
        record = next(r for r in records if r.request_id == first.request_id)
        if first.kind == "tool-approval" and response.option_id is None and not await self._may_answer(record, principal):
            return None  # words in the tool's place from someone who may not give them: a message of theirs
        result = await self.settler.answer(response, record=record)
        if result.state == "invalid" or (not is_owner and result.state in ("rejected", "failed", "forbidden")):
            return None  # it did not count as an answer: it waits as their message
        await self.p.store.take_message(TakeMessage(queued_in or session_id, message))
        return result

    async def _may_answer(self, record: RequestRecord, principal: Principal | None) -> bool:
        """Would the approval's response policy take this person's words in the tool's place (a dry run)?"""
        if principal is None:
            return False
        decision = await self.settler.check(record, principal, "approve")
        return decision is not None and decision.type == "allowed"
