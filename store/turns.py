"""A session's turns in Redis (DESIGN §7, §9, §12): state, the turn lease, events, parked requests and their
settle, execution markers, deadlines and retirement. Key names: store/session_keys.py; the scripts:
store/turn_scripts.py; a request record's fields: store/requests.py; the inbox (messages recorded, with the
lease for this process's drive, and taken): store/turn_inbox.py; listings across sessions (a workspace's
pending requests, inspection by SCAN): store/turn_listings.py.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis

from bot.engine.turn_commands import (
    AmendRequest,
    CallMark,
    CallStart,
    CancelTurn,
    CommitCommand,
    Committed,
    FailureCount,
    LeaseAnswer,
    LeaseCommand,
    RequestsRead,
    SessionRead,
    Sweep,
    Swept,
)
from bot.protocol import (
    CancelRequested,
    Event,
    HeldLease,
    InputResolved,
    LeaseLost,
    MessageTaken,
    RequestChanged,
    RequestRecord,
    Resolution,
    Responders,
    SessionSnapshot,
    SettleCommand,
    SettleResult,
    UnknownRequest,
    event_from_json,
)
from bot.state import SavedState
from store import turn_scripts as lua
from store.assistant_threads import AssistantThreads
from store.delivery_pass import BeginWithCheckpoint
from store.grants import GrantStore, session_ended
from store.pipelined import Command, evalsha, pipelined
from store.replay import replay_own, replay_safe
from store.requests import as_parked, record_fields, record_from_packed
from store.retirement import retire_audited
from store.session_keys import (
    ACTIVE,
    DEFAULT_RETENTION_SECONDS,
    EVENTS_MAXLEN,
    FORGET_IF_UNCHANGED,
    OUTBOX,
    OUTBOX_GRACE_MS,
    RETIRE,
    SETTLED_LOOK_AGAIN_MS,
    TIMERS,
    now_ms,
)
from store.turn_inbox import TurnInbox


class RedisTurns(TurnInbox):
    """What the turn loop needs of Redis (bot.engine.parts.TurnStore; their delivery: store/outbox.py): the port's
    verbs, each one round trip or as few as the store can make it, and the plain reads the frontends use too
    (a request's record, a workspace's pending requests, a session's state)."""

    def __init__(self, redis: Redis, *, lease_ms: int = 30_000, retention_s: int = DEFAULT_RETENTION_SECONDS):
        super().__init__(redis, lease_ms=lease_ms, retention_s=retention_s)
        self.grants = GrantStore(redis, self.key)  # standing approvals, listed per workspace
        self._commit = redis.register_script(replay_own(lua.COMMIT))
        self._settle = redis.register_script(replay_own(lua.SETTLE, then=lua.SETTLE_READ))
        self._begin = redis.register_script(replay_safe(lua.BEGIN))
        self._release = redis.register_script(lua.RELEASE)
        self._retire = redis.register_script(lua.RETIRE)
        self._timers_claim = redis.register_script(lua.TIMERS_CLAIM)
        self._mark_once_script = redis.register_script(replay_safe(lua.MARK_ONCE))
        self._change_responders_script = redis.register_script(replay_safe(lua.CHANGE_RESPONDERS))
        self._forget_if_unchanged = redis.register_script(FORGET_IF_UNCHANGED)
        self._lease_and_read = redis.register_script(lua.LEASE_AND_READ)

    # the port's reads --------------------------------------------------------------------------

    async def read(self, query: SessionRead) -> SessionSnapshot:
        """A session's snapshot (``SessionRead``), one round trip."""
        if query.state_only:
            return SessionSnapshot(saved_state=await self.redis.get(self.key(query.session_id, "state")) or None)
        return await self.snapshot(query.session_id, known_state=query.known_state)

    async def requests(self, query: RequestsRead) -> list[RequestRecord]:
        """Request records (``RequestsRead``): by id, or a workspace's pending ones."""
        if query.pending:
            return await self.pending_for_team(query.team_id, limit=query.limit)
        if query.must_exist and len(query.ids) == 1:
            return [await self.get_request(query.ids[0])]
        if query.must_exist:
            return await self._all_of(query.ids)
        return await self.get_requests(query.ids)

    async def _all_of(self, request_ids: Sequence[str]) -> list[RequestRecord]:
        records = await self.get_requests(request_ids)
        if len(records) != len(request_ids):
            found = {r.request_id for r in records}
            raise UnknownRequest(next(rid for rid in request_ids if rid not in found))
        return records

    # state and lease -------------------------------------------------------------------------

    async def load(self, session_id: str) -> tuple[dict[str, Any] | None, set[str], str | None]:
        """The session state (None if new), its granted once() keys and a requested cancel."""
        snapshot = await self.snapshot(session_id)
        return snapshot.state, snapshot.grants, snapshot.cancel

    async def snapshot(self, session_id: str, *, known_state: SavedState = None) -> SessionSnapshot:
        """Everything the turn loop reads before it moves a session forward, in one round trip.

        ``known_state``: the state this lease holder committed last (nobody else can have written it
        since), so it is not read again; nor is the failure count, read once per pass."""
        known = _as_text(known_state) or None
        # (one pipeline on Redis; on a Cluster the reads go one by one: its pipelines refuse MGET)
        return self._snapshot_of(await pipelined(self.redis, self._snapshot_reads(session_id, known), []), known)

    def _snapshot_reads(self, session_id: str, known_state: str | None) -> list[Command]:
        """The reads of a session's snapshot (the state only if not ``known_state``; the strings in one MGET);
        :meth:`_snapshot_of` makes one of their replies."""
        key = self.key
        if known_state is None:
            first: Command = ("mget", ([key(session_id, "state"), key(session_id, "cancel"), key(session_id, "fails")],))
        else:
            first = ("get", (key(session_id, "cancel"),))
        return [first, ("smembers", (key(session_id, "grants"),)), ("lrange", (key(session_id, "inbox"), 0, -1))]

    def _snapshot_of(self, replies: list[Any], known_state: str | None) -> SessionSnapshot:
        strings, grants, inbox = replies[:3]
        raw, cancel, fails = strings if known_state is None else (None, strings, None)
        return self._snapshot_from([raw, grants, cancel, inbox, fails] if known_state is None
                                   else [grants, cancel, inbox], known_state)

    async def state(self, session_id: str) -> dict[str, Any] | None:
        """The saved session state alone (one command), for callers that need nothing else."""
        raw = await self.redis.get(self.key(session_id, "state"))
        return json.loads(raw) if raw else None

    async def exists(self, session_id: str) -> bool:
        """Whether the session is alive: it has a state and its end, if any, has not passed (an ended session
        not yet retired is gone already)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(self.key(session_id, "state"))
        pipe.get(self.key(session_id, "end"))
        there, ends = await pipe.execute()
        return bool(there) and not session_ended(ends)

    async def cancel_requested(self, session_id: str) -> str | None:
        """The turn id someone asked to cancel, if any."""
        raw = await self.redis.get(self.key(session_id, "cancel"))
        return raw.decode() if raw else None

    async def cancel(self, command: CancelTurn) -> None:
        await self.redis.set(self.key(command.session_id, "cancel"), command.turn_id)

    async def lease(self, command: LeaseCommand) -> LeaseAnswer:
        """Take, renew or let go of the turn lease (``LeaseCommand``), one round trip each."""
        c = command
        if c.action == "take":
            token, snapshot = await self._take_lease(c.session_id)
            return LeaseAnswer(token, token is not None, None, snapshot)
        if c.action == "renew":
            held, cancel = await self._renew_lease(c.session_id, c.token)
            return LeaseAnswer(c.token, held, cancel)
        snapshot = await self._release_lease(c.session_id, c.token, still_active=c.still_active,
                                             retry_after_ms=c.retry_after_ms, read=c.read)
        return LeaseAnswer(c.token, False, None, snapshot)

    async def _take_lease(self, session_id: str) -> tuple[str | None, SessionSnapshot | None]:
        """Take the turn lease and read the session's snapshot (one round trip, one script); (None, None) when
        another worker holds the lease. Once the lease is ours nobody else commits, so the read is current;
        the snapshot's ``requests`` are the records of the requests its turn waits on, read with it (a click
        may settle one right after: its own drive then finds the lease taken, and the release's read sees it)."""
        token = secrets.token_hex(8)
        keys = [self.key(session_id, name) for name in ("lease", "state", "grants", "cancel", "inbox", "fails")]
        read, _ = await self._pipelined(self._lease_and_read, keys, [token, self.lease_ms],
                                        after=[("zadd", (ACTIVE, {session_id: now_ms() + self.lease_ms}))])
        return (token, self._lease_read(read)) if read else (None, None)

    async def _renew_lease(self, session_id: str, token: str) -> tuple[bool, str | None]:
        """Extend the lease if still held; returns (held, the turn id someone asked to cancel), the cancel
        read in the same script, so a replica running a tool learns of a stop without a round trip more."""
        held, cancel = await self.redis.eval(
            "local held = 0 "
            "if redis.call('GET', KEYS[1]) == ARGV[1] then held = redis.call('PEXPIRE', KEYS[1], ARGV[2]) end "
            "return {held, redis.call('GET', KEYS[2]) or ''}",
            2,
            self.key(session_id, "lease"),
            self.key(session_id, "cancel"),
            token,
            self.lease_ms,
        )
        if held:
            await self.redis.zadd(ACTIVE, {session_id: now_ms() + self.lease_ms})
        return bool(held), (cancel.decode() if isinstance(cancel, bytes) else cancel) or None

    async def _release_lease(
        self, session_id: str, token: str, *, still_active: bool, retry_after_ms: int = 0, read: bool = False
    ) -> SessionSnapshot | None:
        """Let the turn lease go; with ``read``, then read the snapshot in the same round trip (what arrived
        while we held the lease, whose own attempt to drive found it taken). Not ``still_active``: the unit of
        work is over, and a session with no open request gets its end (and a place on ``hitl:retire``)."""
        ends = self._ends_at()
        index: list[Command] = ([("zadd", (ACTIVE, {session_id: now_ms() + retry_after_ms}))] if still_active
                                else [("zrem", (ACTIVE, session_id)), ("zadd", (RETIRE, {session_id: ends}))])
        reads = self._snapshot_reads(session_id, None) if read else []
        keys = [self.key(session_id, name) for name in ("lease", "open", "state", "end")]
        _, *rest = await self._pipelined(self._release, keys, [token, "" if still_active else ends],
                                         after=[*index, *reads])
        return self._snapshot_of(rest[len(index):], None) if read else None

    async def count_failures(self, command: FailureCount) -> int:
        """Count a session's unexpected drive failures in a row (reset on success); returns the count."""
        key = self.key(command.session_id, "fails")
        if not command.failed:
            await self.redis.delete(key)
            return 0
        return int(await self.redis.incr(key))

    async def _due_sessions(self, *, limit: int = 100) -> list[str]:
        """Sessions whose lease lapsed while a turn still needed work (a dead worker's turns)."""
        raw = await self.redis.zrangebyscore(ACTIVE, 0, now_ms(), start=0, num=limit)
        return [r.decode() for r in raw]

    async def commit(self, command: CommitCommand) -> Committed:
        """Atomically checkpoint state, create requests and append events, as ``command`` says, in one round trip:
        the events with their sequence numbers, the snapshot read after it (``read``), the calls it started.

        ``ref`` (the frontend's routing data) is kept beside the outbox cursor for the deliverer.
        ``take``: queued messages this state has taken in; they leave the inbox in the same write.

        With a token, fails with LeaseLost unless this worker still holds the turn lease; fails with
        MessageTaken, writing nothing, if another worker took one of ``take`` first; with
        ``unless_cancelled`` (a turn id), fails with CancelRequested, writing nothing, if someone asked
        to cancel that turn.

        ``read``: then read the session's snapshot in the same round trip, the committed ``state`` taken
        as known (what the lease holder's next step starts from); else the snapshot is None.
        ``release``: the drive ends with this checkpoint: the lease goes with it (only if it is written)
        and, with ``read``, what arrived while the lease was held is read: a lease holder's gets the state it
        wrote, a stop requested until its script let the lease go and the inbox after it (no grants, no
        failure count: what a drive that let go decides on); without a token, the whole snapshot.
        ``begin``: execution markers to start with the checkpoint (each as :meth:`mark_call` would).
        ``finished``: calls' results (marker → JSON), written first even if refused (as :meth:`mark_call`).
        ``opening``: begin that delivery pass in the same round trip, after the script (``begin_with_checkpoint``;
        the pass is set on it, also when the checkpoint is refused).
        """
        c = command
        session_id, token, state, events, requests = c.session_id, c.token, c.state, c.events, c.requests
        markers, finished, take, ref, read, release = c.begin, c.finished or {}, c.take, c.ref, c.read, c.release
        keys = [
            self.key(session_id, "lease"),
            self.key(session_id, "state"),
            self.key(session_id, "events"),
            self.key(session_id, "seq"),
            self.key(session_id, "out"),
            self.key(session_id, "open"),
            self.key(session_id, "end"),
            *[self.request_key(r.request_id) for r in requests],
            self.key(session_id, "cancel"),
            self.key(session_id, "inbox"),
            *[self.key(session_id, f"exec:{marker}") for marker in markers],
            *[self.key(session_id, f"exec:{marker}") for marker in finished],
        ]
        ends = self._ends_at()  # written by the script only if this checkpoint ends the turn
        fields = [record_fields(r) for r in requests]  # written, and remembered as a read would return them
        args: list[Any] = [
            token or "",
            _as_text(state),
            len(events),
            len(requests),
            *[e.model_dump_json(exclude_none=True) for e in events],
            *[json.dumps(f, separators=(",", ":")) for f in fields],
            "1" if release and token else "",
            c.unless_cancelled or "",
            json.dumps([json.dumps(m, separators=(",", ":")) for m in take]) if take else "[]",
            ref.model_dump_json(exclude_none=True) if ref is not None else "",
            ends,
            EVENTS_MAXLEN,
            self.retention_ms,
            len(markers),
            *finished.values(),
            len(finished),
        ]
        # the outbox entry travels in the same write as the commit, so committed events are never
        # left without someone to deliver them (the committer normally delivers them at once)
        extra: list[Command] = []
        opening = c.opening
        begin = opening.begin if opening is not None and isinstance(opening.begin, BeginWithCheckpoint) else None
        begin = begin if begin is not None and begin.redis is self.redis else None
        if events and begin is None:  # (a pass begun here puts the session on the list itself, claimed)
            extra.append(("zadd", (OUTBOX, {session_id: now_ms() + OUTBOX_GRACE_MS})))
        now = time.time()
        for r in requests:
            extra.append(("zadd", (self.pending_key(r.team_id), {r.request_id: now})))
            for kind, due in (("expire", r.request.expires_at), ("remind", r.request.remind_at),
                              ("escalate", r.request.escalate_at)):
                if due is not None:
                    extra.append(("zadd", (TIMERS, {f"{kind}:{r.request_id}": int(due.timestamp() * 1000)})))
        if release:  # the lease is no longer ours: read everything, state too
            extra.append(("zrem", (ACTIVE, session_id)))
            if token and not requests:  # the turn ended: the script wrote the session's end
                extra.append(("zadd", (RETIRE, {session_id: ends})))
        # after a drive's last checkpoint (``release`` with a token), what came while the lease was held: the
        # script read a requested stop as it let go, the inbox is read here; the state is the one just written
        # (another holder's since re-checks for work itself), grants and failures are not needed (bot.engine.drive)
        lean = release and bool(token) and state is not None
        known = None if release or not read else _as_text(state) or None  # the next step starts from it
        reads: list[Command] = ([("lrange", (self.key(session_id, "inbox"), 0, -1))] if lean else
                                self._snapshot_reads(session_id, known))
        reads = reads if read and (release or state is not None) else []
        if begin is None:
            written, *rest = await self._eval_pipelined(self._commit, keys, args, [*extra, *reads])
        else:  # the pass's begin after all of it, in the same round trip
            written, *rest = begin.after(await self._eval_pipelined(
                self._commit, keys, args, [*extra, *reads, *begin.commands], scripts=begin.scripts,
                raise_on_error=False))
        if written == -1:
            raise LeaseLost(session_id)
        if written == -2:
            raise MessageTaken(session_id)
        if written == -3:
            raise CancelRequested(session_id)
        first, started, *asked = written  # (asked: the stop the script read as it let the lease go)
        cancel = asked[0] if asked else b""
        begun = {m: (v == b"", None if v == b"" else v.decode()) for m, v in zip(markers, started, strict=True)}
        if reads and lean:
            snapshot: SessionSnapshot | None = SessionSnapshot(
                saved_state=_as_text(state) or None, cancel=cancel.decode() or None,
                inbox=[json.loads(m) for m in rest[len(extra)]])
        else:
            snapshot = self._snapshot_of(rest[len(extra):], known) if reads else None
        self.remember(*(as_parked(f) for f in fields))  # the next click on one reads nothing first
        return Committed(_with_seq(events, int(first)), snapshot, begun)

    # events ----------------------------------------------------------------------------------

    async def events(self, session_id: str, *, after_seq: int = 0, count: int = 1000) -> list[Event]:
        entries = await self.redis.xrange(self.key(session_id, "events"), count=count)
        out: list[Event] = []
        for _id, fields in entries:
            seq = int(fields[b"s"])
            if seq <= after_seq:
                continue
            event = event_from_json(fields[b"e"])
            event.seq = seq
            out.append(event)
        return out

    # requests --------------------------------------------------------------------------------

    async def settle(self, command: SettleCommand) -> SettleResult:
        """One atomic settle attempt (one round trip; a second only to keep the pending index after the approval
        that completes n of m, or a refusal as changed), as ``command`` says (``bot.protocol.SettleCommand``):
        with ``lease``, a settle that completes the step takes the turn lease if it is free, with what its
        holder starts from (``SettleResult.held``); with ``rev``, RequestChanged (nothing written) if the open
        request changed since.

        ``grant``: the conversation grant approving records. It is listed for the workspace first (its own
        round trip; a failure raises and nothing is settled), then the settle writes the grant and its
        record together. The listing is an index: ``GrantStore.list`` shows only grants in force, so an
        entry whose settle never came (a crash, a click that did not count) is dropped, never shown."""
        c = command
        record, mode, response, grant, lease = c.record, c.mode, c.response, c.grant, c.lease
        if grant is not None:
            await self.grants.add(grant)
        rid = record.request_id
        key = self.request_key(rid)
        keys = [
            key,
            f"{key}:ok",
            self.key(record.session_id, "events"),
            self.key(record.session_id, "seq"),
            self.key(record.session_id, "grants"),
            *[self.key(record.session_id, name) for name in ("open", "state", "granted", "end", "lease", "cancel",
                                                            "inbox", "fails")],
            *[self.request_key(b) for b in c.batch if b != rid],
        ]
        responder = response.principal if response else None
        args = [
            mode,
            datetime.now(UTC).isoformat(),
            c.outcome,
            response.model_dump_json() if response else "",
            responder.model_dump_json() if responder else "",
            c.responder_id,
            c.required,
            grant.approval_key if grant is not None else "",
            c.note or "",
            EVENTS_MAXLEN,
            *[_events_json(evs) for evs in (c.on_settled, c.on_partial, c.on_rejected, c.on_stale)],
        ]
        gone = [InputResolved(session_id=record.session_id, turn_id=record.turn_id, resolutions=[
            Resolution(request_id=rid, kind=record.request.kind, outcome="cancelled", ended_by="turn-over")])]
        ends, token = self._ends_at(), secrets.token_hex(8) if lease else ""
        args += [self.retention_ms, _events_json(gone), grant.grant_id if grant is not None else "",
                 grant.model_dump_json() if grant is not None else "", ends, token, self.lease_ms,
                 "" if c.rev is None else c.rev]
        # in the same round trip: have the sweep look at the session soon, so a turn whose last answer
        # this was resumes even if this process dies before it drives it, and the outbox delivers what
        # the settle appended (the card update) even then
        extra: list[Command] = [("zadd", (OUTBOX, {record.session_id: now_ms() + OUTBOX_GRACE_MS}))]
        if mode == "settle":  # (with the lease taken, the sweep looks when it would have lapsed: its holder died)
            look = self.lease_ms if lease else SETTLED_LOOK_AGAIN_MS
            extra.append(("zadd", (ACTIVE, {record.session_id: now_ms() + look})))
        if mode != "reject":  # a settle that completes its step writes the session's end
            extra.append(("zadd", (RETIRE, {record.session_id: ends})))
        # the workspace's pending index (App Home) is kept here, not by a delivery. In another slot, no script
        # writes both: a settle that can only close the request takes it off in the same round trip; one that
        # may leave it open (a refusal, one approval of several), once its reply says it closed
        pending, closing = self.pending_key(record.team_id), mode == "settle" and not (c.required > 1 and c.outcome == "approved")
        if closing:
            extra.append(("zrem", (pending, rid)))
        (state, first, count, complete, read, *now), *_ = await self._eval_pipelined(self._settle, keys, args, extra)
        state = state.decode() if isinstance(state, bytes) else state
        self.forget(rid)  # (whatever it did, the copy this process kept is old now)
        if state == "missing":
            raise UnknownRequest(rid)
        if state == "changed":
            fresh = record_from_packed(now[0])
            assert fresh is not None  # (read by the same script that found its status: it is there)
            self.remember(fresh)
            if closing:  # it is still open: back on the index (a race between two answers, rare)
                await self.redis.zadd(pending, {rid: fresh.request.created_at.timestamp()}, nx=True)
            raise RequestChanged(fresh.model_copy())
        if not closing and state in ("settled", "gone"):
            await self.redis.zrem(pending, rid)
        chosen = {"settled": c.on_settled, "partial": c.on_partial, "rejected": c.on_rejected, "stale": c.on_stale,
                  "gone": gone}[state]
        events = _with_seq([_fill_approvals(e, int(count)) for e in chosen], int(first))
        return SettleResult(
            state=state, batch_complete=bool(complete), approvals=int(count), record=record, events=events,
            held=HeldLease(token=token, snapshot=self._lease_read(read)) if read else None)

    # exactly-once execution ------------------------------------------------------------------

    async def mark_call(self, command: CallMark) -> CallStart:
        """Start a call (fenced by the lease token: LeaseLost, nothing started, if it is gone): (True, None) if
        this worker may run it, else (False, what was recorded); or, with ``result_json``, record what it did."""
        c = command
        if c.result_json is not None:
            await self._finish_call(c.session_id, c.marker, c.result_json)
            return True, None
        return await self._begin_call(c.session_id, c.marker, c.token)

    async def _begin_call(self, session_id: str, marker: str, token: str) -> CallStart:
        keys = [self.key(session_id, "lease"), self.key(session_id, f"exec:{marker}")]
        (got, value), *_ = await self._eval_pipelined(self._begin, keys, [token, self.retention_ms], [])
        if got == -1:
            raise LeaseLost(session_id)
        return got == 1, (value.decode() if isinstance(value, bytes) else None)

    async def _finish_call(self, session_id: str, marker: str, result_json: str) -> None:
        """Not fenced: a fact about the world, and a successor that finds it uses the real result instead of
        reporting the call as interrupted."""
        await self.redis.set(self.key(session_id, f"exec:{marker}"), result_json, px=self.retention_ms)

    # deadlines ---------------------------------------------------------------------------------

    async def sweep(self, command: Sweep) -> Swept:
        """What the recovery sweep asks (``Sweep``)."""
        c = command
        if c.what == "sessions":
            return Swept(sessions=await self._due_sessions(limit=c.limit))
        if c.what == "timers":
            return Swept(timers=await self._timers_due(c.now_ms, limit=c.limit))
        if c.what == "timer_done":
            await self._timer_done(c.member, c.claim)
            return Swept()
        return Swept(retired=await self._retire_due(limit=c.limit))

    async def _timers_due(self, now_ms: int, *, limit: int = 100) -> list[tuple[str, int]]:
        """Claim up to ``limit`` timers due at ``now_ms``: (member, claim) pairs, each to one caller only."""
        raw = await self._timers_claim(keys=[TIMERS], args=[now_ms, limit, self.lease_ms])
        return [(raw[i].decode(), int(raw[i + 1])) for i in range(0, len(raw), 2)]

    async def _retire_due(self, *, limit: int = 100) -> int:
        """Retire sessions whose end has passed (the recovery sweep; three round trips for up to ``limit``):
        claim them from ``hitl:retire`` as timers are claimed, so two sweeping replicas never race; one
        script per session re-checks and deletes its keys in one DEL; then each leaves the schedule, or goes
        back on it by its new end (it was used again), or a retention later (something still holds it: its
        owner writes its end when that ends). Returns how many were retired."""
        now = now_ms()
        raw = await self._timers_claim(keys=[RETIRE], args=[now, limit, self.lease_ms])
        claimed = [(raw[i].decode(), int(raw[i + 1])) for i in range(0, len(raw), 2)]
        if not claimed:
            return 0
        verdicts = await pipelined(self.redis, [evalsha(self._retire, self.own_keys(sid), [now, "?"])
                                                for sid, _ in claimed], [self._retire])
        verdicts = await retire_audited(self.redis, self._retire, self.own_keys, now, claimed, verdicts)
        after: list[Command] = []
        for (sid, claim), (verdict, ends) in zip(claimed, verdicts, strict=True):
            if verdict == 2:
                after.append(("zadd", (RETIRE, {sid: int(ends)})))
            elif verdict == 3:
                after.append(("zadd", (RETIRE, {sid: now + self.retention_ms})))
            elif verdict == 5:  # its audit lags: a pass offers what it lacks (from the floor), then it is retired
                after += [("zadd", (OUTBOX, {sid: now})), ("zadd", (RETIRE, {sid: now + self.lease_ms}))]
            else:
                after.append(evalsha(self._forget_if_unchanged, [RETIRE], [sid, claim]))
                if verdict == 1 and (thread := AssistantThreads.key_of_session(sid)) is not None:
                    after.append(("delete", (thread,)))  # what the bot remembers of its thread ends with it
        await pipelined(self.redis, after, [self._forget_if_unchanged])
        return sum(1 for verdict, _ in verdicts if verdict == 1)

    async def _timer_done(self, member: str, claim: int) -> None:
        """Forget a fired timer, unless it was claimed again meanwhile (we were too slow)."""
        await self._pipelined(self._forget_if_unchanged, [TIMERS], [member, claim])

    async def amend(self, command: AmendRequest) -> bool:
        """Change an open request and append its event (``AmendRequest``): remind it once (an ``input.reminded``),
        escalate it once to more people (an ``input.escalated``), or store who may settle it now (an
        ``input.responders``). False when it was settled meanwhile, or already changed so."""
        c = command
        if c.what == "remind":
            return await self._mark_once(c.record, "reminded", "1", c.event)
        if c.what == "escalate":
            value = json.dumps([p.model_dump(mode="json") for p in c.people], separators=(",", ":"))
            return await self._mark_once(c.record, "escalated_to", value, c.event)
        assert c.responders is not None
        return await self._change_responders(c.record, c.responders, c.event, version=c.version)

    async def _mark_once(self, record: RequestRecord, field: str, value: str, event: Event) -> bool:
        sid = record.session_id
        self.forget(record.request_id)
        keys = [self.request_key(record.request_id), self.key(sid, "events"), self.key(sid, "seq")]
        args = [field, value, event.model_dump_json(exclude_none=True), EVENTS_MAXLEN]
        first, _ = await self._eval_pipelined(self._mark_once_script, keys, args,
                                             [("zadd", (OUTBOX, {sid: now_ms() + OUTBOX_GRACE_MS}))])
        return bool(first)

    async def _change_responders(self, record: RequestRecord, responders: Responders, event: Event, *,
                                version: int) -> bool:
        """Store who may settle an open request now (described from policy ``version``) and append ``event``
        (an ``input.responders``); False when it was settled meanwhile or a newer description is stored."""
        sid = record.session_id
        self.forget(record.request_id)
        keys = [self.request_key(record.request_id), self.key(sid, "events"), self.key(sid, "seq")]
        args = [responders.model_dump_json(), version, event.model_dump_json(exclude_none=True), EVENTS_MAXLEN]
        changed, _ = await self._eval_pipelined(self._change_responders_script, keys, args,
                                               [("zadd", (OUTBOX, {sid: now_ms() + OUTBOX_GRACE_MS}))])
        return bool(changed)


def _as_text(state: SavedState) -> str:
    """A state as the checkpoint writes it ("": none)."""
    if state is None:
        return ""
    return state if isinstance(state, str) else json.dumps(state, separators=(",", ":"))


def _events_json(events: Sequence[Event]) -> str:
    if not events:
        return ""
    return json.dumps([e.model_dump_json(exclude_none=True) for e in events])


def _fill_approvals(event: Event, count: int) -> Event:
    if getattr(event, "approvals", None) == -1:
        return event.model_copy(update={"approvals": count})
    return event


def _with_seq(events: Sequence[Event], first: int) -> list[Event]:
    """The events as written, numbered: copies (the caller's own are left as they were), not validated
    again (they are the engine's own, just serialized from these very objects)."""
    return [event.model_copy(update={"seq": first + i}) for i, event in enumerate(events)]
