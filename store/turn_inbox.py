"""A session's inbox (DESIGN §7, §8; store/turns.py's part for messages): a message is recorded once per
message id, durably, before anyone acknowledges it, and leaves the queue only with the turn that saves it
(or the answer it gives). Also the snapshot a lease holder starts from, as the scripts read it, since the
record of a message this process drives next takes the turn lease and reads it (store/turn_scripts.py).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from redis.asyncio import Redis

from bot.engine.turn_commands import RecordedMessage, RecordMessage, TakeMessage
from bot.protocol import HeldLease, SessionSnapshot
from store import turn_scripts as lua
from store.pipelined import Command
from store.replay import replay_own, replay_safe
from store.requests import records_read_in_script
from store.retirement import audit_asked, audit_progress
from store.session_keys import (
    ACTIVE,
    DEFAULT_RETENTION_SECONDS,
    MESSAGE_DEDUPE_SECONDS,
    OUTBOX_GRACE_MS,
    now_ms,
)
from store.turn_listings import TurnListings


class TurnInbox(TurnListings):
    """Messages in: record (with the lease for this process's drive, or with a read), list, take."""

    def __init__(self, redis: Redis, *, lease_ms: int = 30_000, retention_s: int = DEFAULT_RETENTION_SECONDS):
        super().__init__(redis, lease_ms=lease_ms, retention_s=retention_s)
        self._record_message = redis.register_script(replay_own(lua.RECORD_MESSAGE, then=lua.RECORD_MESSAGE_READ))
        self._take = redis.register_script(replay_safe(lua.TAKE))

    @staticmethod
    def _snapshot_from(replies: list[Any], known_state: str | None) -> SessionSnapshot:
        if known_state is not None:
            grants, cancel, inbox = replies
            return SessionSnapshot(saved_state=known_state, grants={g.decode() for g in grants},
                                   cancel=cancel.decode() if cancel else None,
                                   inbox=[json.loads(m) for m in inbox])
        raw, grants, cancel, inbox, fails = replies
        return SessionSnapshot(
            saved_state=raw or None,
            grants={g.decode() for g in grants},
            cancel=cancel.decode() if cancel else None,
            inbox=[json.loads(m) for m in inbox],
            failures=int(fails or 0),
        )

    def _lease_read(self, read: list[Any]) -> SessionSnapshot:
        """The snapshot a script read with the lease (``lease_read`` in store/turn_scripts.py)."""
        *snapshot, found = read
        records = records_read_in_script(found)
        self.remember(*records.values())
        return self._snapshot_from(snapshot, None).model_copy(update={"requests": records})

    # inbox -----------------------------------------------------------------------------------

    async def record_message(self, command: RecordMessage) -> RecordedMessage | None:
        """Queue a message durably, once per message id (Slack sends some twice); None for a repeat
        (``RecordMessage``).

        The dedupe mark and the queue entry are one atomic write, and the session is put on the sweep's
        list in the same round trip: a message acknowledged to Slack is never lost, even if this process
        dies right after. ``then`` "lease": the same script takes the turn lease if free and reads what its
        holder starts from (either way; the sweep looks when it would lapse). "read": the session's inbox and
        state are read after the record in the same round trip: at least as new as the message; the inbox
        before the state, so a message that a turn took since is seen with that turn (the take and the state
        are one write)."""
        if command.then == "lease":
            return await self._record_and_lease(command.session_id, command.message, command.message_id)
        return await self._record_and_read(command.session_id, command.message, command.message_id,
                                           read=command.then == "read")

    async def _record_and_lease(self, session_id: str, message: dict[str, Any], message_id: str | None
                                ) -> RecordedMessage | None:
        keys, token = [self.key(session_id, f"msg:{message_id or '-'}"), *self.own_keys(session_id)], secrets.token_hex(8)
        args = [message_id or "", json.dumps(message, separators=(",", ":")), MESSAGE_DEDUPE_SECONDS, now_ms(),
                token, self.lease_ms, "?"]
        done, _ = await self._eval_pipelined(self._record_message, keys, args,
                                             [("zadd", (ACTIVE, {session_id: now_ms() + self.lease_ms}))])
        if audit_asked(done):
            args[-1] = await audit_progress(self.redis, session_id, done[1])
            done, _ = await self._eval_pipelined(self._record_message, keys, args,
                                                 [("zadd", (ACTIVE, {session_id: now_ms() + self.lease_ms}))])
        seen = self._lease_read(done[2]) if done else None
        return RecordedMessage(seen, HeldLease(token=token, snapshot=seen) if done[1] else None) if seen is not None \
            else None

    async def _record_and_read(self, session_id: str, message: dict[str, Any], message_id: str | None, *,
                               read: bool) -> RecordedMessage | None:
        keys = [self.key(session_id, f"msg:{message_id or '-'}"), *self.own_keys(session_id)]
        args = [message_id or "", json.dumps(message, separators=(",", ":")), MESSAGE_DEDUPE_SECONDS, now_ms(), "", 0,
                "?"]
        extra: list[Command] = [("zadd", (ACTIVE, {session_id: now_ms() + OUTBOX_GRACE_MS}))]
        if read:
            extra += [("lrange", (self.key(session_id, "inbox"), 0, -1)), ("get", (self.key(session_id, "state"),))]
        recorded, _, *seen = await self._eval_pipelined(self._record_message, keys, args, extra)
        if audit_asked(recorded):
            args[-1] = await audit_progress(self.redis, session_id, recorded[1])
            recorded, _, *seen = await self._eval_pipelined(self._record_message, keys, args, extra)
        if not recorded:
            return None
        if not read:
            return RecordedMessage(SessionSnapshot())
        inbox, raw = seen
        return RecordedMessage(SessionSnapshot(saved_state=raw or None,
                                               inbox=[json.loads(m) for m in inbox]))

    async def inbox(self, session_id: str) -> list[dict[str, Any]]:
        return [json.loads(m) for m in await self.redis.lrange(self.key(session_id, "inbox"), 0, -1)]

    async def take_message(self, command: TakeMessage) -> bool:
        """Remove one queued message; False if another worker already took it."""
        raw = json.dumps(command.message, separators=(",", ":"))
        taken, *_ = await self._eval_pipelined(self._take, [self.key(command.session_id, "inbox")], [raw], [])
        return bool(taken)
