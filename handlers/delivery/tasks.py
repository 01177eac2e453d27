"""A turn's tool calls as tasks of its streamed answer: ``chat.startStream(chunks=[task_update…],
task_display_mode=…)``, updated with ``appendStream`` chunks, ended by the answer's ``stopStream``.

The tasks follow the session's committed events, as the outbox delivers them (any replica): a card
(``input.requested``) makes its call a ``pending`` task "waiting for @bob"; the decision (``input.resolved``)
says "approved by @bob" or makes it ``error`` ("cancelled: reason", "expired…"); ``action.started`` makes it
``in_progress``; ``action.result`` ``complete`` with the result's one line as its output, or ``error`` (the tool
raised; the policy refused it: "refused: reason").

Calls are kept low: a stream that would last under the status delay is not started (like the session status,
``handlers.delivery.sessions``). A quick cycle (card, click, answer within the delay) starts none: its answer is posted
whole, as before, and it costs no Slack call more. A turn whose call is still waiting or running after the delay
gets its stream then (one ``startStream`` with its tasks); changes are batched (one ``appendStream`` a second at
most) and the last of them ride in the ``stopStream`` that ends the answer (``handlers.delivery.streams``). A step's answer
text that streams while the turn's task stream is open goes into it (the same message).

Each step's answer ends the stream; calls that a later step makes start another (below that answer). The tasks
of a turn are kept beside the session (``tasks:<turn>``, written with the delivery pass's closing round trip), so
a replica that takes the session over carries on with them.

Where Slack refuses the methods or the chunks (``not_authorized``, ``invalid_arguments``, an older workspace) the
workspace is remembered and asked no more by this process; the turn shows what it shows without tasks (cards and
the answer), and the refusal is logged once, at info.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError

from blocks.tasks import (
    approved_details,
    cancelled_details,
    display_mode,
    mentioned,
    named,
    plan_chunk,
    refused_reason,
    result_summary,
    standing_details,
    task_chunk,
    unanswered_details,
    waiting_details,
)
from bot.protocol import (
    ActionResult,
    ActionStarted,
    Event,
    InputRequested,
    InputResolved,
    MessageCompleted,
    TurnStarted,
)
from bot.session import SessionRef
from handlers.delivery.marks import transient
from handlers.delivery.pacing import Pacer, retry_after
from handlers.delivery.status import STATUS_DELAY_S
from handlers.shared.deps import ClientFor
from store.post_ledger import PostLedger

log = logging.getLogger(__name__)

STOP_TRIES = 5  # a stop Slack rate limits is sent again this many times, each after Slack's Retry-After
FLUSH_EVERY_S = 1.0  # task changes are sent at most once a second (appendStream, Tier 4), or with the answer
TURNS_KEPT = 10_000  # turns this process keeps tasks of in memory (their record in Redis stays)
# Slack refuses the task surface in this workspace: remember it, fall back to today's answer
REFUSED = {"unknown_method", "not_authorized", "missing_scope", "not_agent_app", "not_allowed_token_type",
           "no_permission", "invalid_arguments", "invalid_chunks", "invalid_task_display_mode"}
GONE = {"message_not_found", "message_not_in_streaming_state", "channel_not_found", "is_archived"}
NEW, OPEN, OFF = "new", "open", "off"  # not streamed yet; streaming; not streamed (refused, failed)

Names = Callable[[SessionRef, list[str]], Awaitable[dict[str, str]]]


def tasks_field(turn_id: str | None) -> str:
    return f"tasks:{turn_id}"


@dataclass
class Taken:
    """An open task stream handed to the answer that ends it: where it is and what it still has to say."""

    channel: str
    ts: str
    chunks: list[dict[str, Any]]


@dataclass
class _Turn:
    session: SessionRef
    turn_id: str
    owner: dict[str, str] = field(default_factory=dict)  # {"user", "team"}: the stream's recipient
    tasks: list[dict[str, Any]] = field(default_factory=list)
    gen: int = 0  # which stream of the turn: an answer ends one, calls after it start the next
    state: str = NEW
    channel: str = ""
    ts: str = ""
    unsent: set[str] = field(default_factory=set)  # tasks changed since Slack was told
    # calls an answer's stopStream showed already: a redelivered event of one starts no stream of its own
    ended: list[str] = field(default_factory=list)
    timer: asyncio.Task[None] | None = None
    flusher: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def record(self) -> str:
        return json.dumps({"gen": self.gen, "state": self.state, "channel": self.channel, "ts": self.ts,
                           "owner": self.owner, "tasks": self.tasks, "ended": self.ended})

    def task(self, task_id: str, title: str) -> dict[str, Any]:
        found = next((t for t in self.tasks if t["id"] == task_id), None)
        if found is None:
            found = {"id": task_id, "title": title, "status": "pending"}
            self.tasks.append(found)
        return found


class TaskStreams:
    def __init__(self, ledger: PostLedger, client_for: ClientFor, *, names: Names | None = None,
                 delay_s: float = STATUS_DELAY_S, flush_every_s: float = FLUSH_EVERY_S,
                 starts: Pacer | None = None, appends: Pacer | None = None,
                 on_stream: Callable[[SessionRef], None] | None = None):
        self.ledger = ledger
        self.client_for = client_for
        self.names = names
        self.delay_s = delay_s
        self.flush_every_s = flush_every_s
        self.starts = starts or Pacer(interval_s=3.0, burst=20)  # chat.startStream: Tier 2, per workspace
        self.appends = appends or Pacer(interval_s=0.6, burst=20)  # chat.appendStream: Tier 4
        self.on_stream = on_stream
        self._turns: dict[str, _Turn] = {}  # "<session>|<turn>"
        self._refused: set[str] = set()  # workspaces where Slack refused streamed tasks
        self._stopping: set[asyncio.Task[None]] = set()  # stops sent again after Slack's wait

    def available(self, session: SessionRef) -> bool:
        return (bool(session.channel.get("thread_ts")) and not session.parent
                and (session.team_id or "") not in self._refused)

    def stop_later(self, session: SessionRef, channel: str, ts: str, chunks: list[dict[str, Any]],
                   exc: SlackApiError) -> bool:
        """A stop Slack could not take now (rate limited, down): sent again in a while, so the stream does not
        stay open (the answer goes elsewhere; a second stop of an ended stream changes nothing). False: the
        error was no such thing."""
        if not transient(exc):
            return False
        task = asyncio.create_task(self._stop_again(session, channel, ts, chunks, retry_after(exc)))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        return True

    async def _stop_again(self, session: SessionRef, channel: str, ts: str, chunks: list[dict[str, Any]],
                          wait_s: float) -> None:
        for _ in range(STOP_TRIES):
            await asyncio.sleep(wait_s)
            client = await self.client_for(session.team_id)
            try:
                await client.chat_stopStream(channel=channel, ts=ts, chunks=chunks or None)
                return
            except SlackApiError as exc:
                if not transient(exc):
                    return  # ended already, or gone
                wait_s = max(retry_after(exc), wait_s)
            except Exception:  # noqa: BLE001 - a courtesy: tried again after the next wait
                log.info("stopping the tasks of %s failed", session.session_id, exc_info=True)

    async def close(self) -> None:
        tasks = [t for turn in self._turns.values() for t in (turn.timer, turn.flusher) if t is not None]
        tasks += list(self._stopping)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- events in --------------------------------------------------------------------------------------

    async def see(self, event: Event, session: SessionRef) -> None:
        """Follow a delivered event of the session (before it is rendered)."""
        if not self.available(session) or event.turn_id is None:
            return
        if isinstance(event, TurnStarted):
            if event.principal is not None and event.principal.slack_user_id:
                turn = await self._turn(session, event.turn_id)
                turn.owner = _owner(event.principal)
            return
        if event.type in ("turn.completed", "turn.failed", "turn.cancelled"):
            await self._end(session, event.turn_id, event.type)
            return
        if not isinstance(event, InputRequested | InputResolved | ActionStarted | ActionResult):
            return
        turn = await self._turn(session, event.turn_id)
        async with turn.lock:
            await self._sync(turn)
            changed = self._apply(turn, event)
            if not changed:
                return
            turn.unsent.update(changed)
            await self.ledger.set(session.session_id, tasks_field(turn.turn_id), turn.record(), in_pass=True)
            if turn.state == NEW and turn.timer is None:
                turn.timer = asyncio.create_task(self._start_later(turn))
            elif turn.state == OPEN and turn.flusher is None:
                turn.flusher = asyncio.create_task(self._flush_later(turn))

    def _apply(self, turn: _Turn, event: Event) -> set[str]:
        """The event's change to the turn's tasks: the ids of the tasks it changed."""
        changed: set[str] = set()
        if isinstance(event, ActionStarted | ActionResult) and event.call_id in turn.ended:
            return changed  # delivered again after its step's answer (a pass redone): shown and ended already
        if isinstance(event, InputRequested):
            for req in event.requests:
                if req.kind != "tool-approval" or req.action is None or req.action.call_id in turn.ended:
                    continue
                if req.principal is not None and req.principal.slack_user_id and not turn.owner:
                    turn.owner = _owner(req.principal)
                task = turn.task(req.action.call_id, req.action.tool_name)
                people = [p.slack_user_id for p in (req.responders.people if req.responders else [])
                          if p.slack_user_id]
                if req.responders is not None and req.responders.rule in ("anyone", "anyone_but", "custom"):
                    people = []
                task.update(status="pending", request_id=req.request_id,
                            details=waiting_details(people, req.responders.required if req.responders else 1))
                changed.add(task["id"])
        elif isinstance(event, InputResolved):
            for resolution in event.resolutions:
                task = next((t for t in turn.tasks if t.get("request_id") == resolution.request_id), None)
                if task is None:
                    continue
                response = resolution.response
                who = response.principal.slack_user_id if response and response.principal else None
                if resolution.outcome == "approved":
                    task["details"] = approved_details(who)
                elif resolution.outcome == "denied":
                    task.update(status="error", details=cancelled_details(who, response.note if response else None))
                elif resolution.outcome in ("expired", "ignored", "cancelled"):
                    task.update(status="error", details=unanswered_details(resolution.outcome))
                else:
                    continue
                changed.add(task["id"])
        elif isinstance(event, ActionStarted):
            task = turn.task(event.call_id, event.tool_name)
            task["status"] = "in_progress"
            if event.standing is not None and not task.get("details"):
                granted_by = event.standing.granted_by
                task["details"] = standing_details(granted_by.slack_user_id if granted_by else None)
            changed.add(task["id"])
        elif isinstance(event, ActionResult):
            task = turn.task(event.call_id, event.tool_name)
            if event.status == "completed":
                task.update(status="complete", output=result_summary(event.status, event.output, event.error))
            elif event.status == "failed":
                task.update(status="error", output=result_summary(event.status, event.output, event.error))
            else:  # not run: a cancel said why already; a stopped turn (TURN_CANCELLED); else the policy refused it
                task["status"] = "error"
                if isinstance(event.output, dict) and event.output.get("code") == "TURN_CANCELLED":
                    task["details"] = "stopped"
                elif not task.get("request_id"):
                    reason = refused_reason(event.output)
                    task["details"] = f"refused: {reason}" if reason else "refused by the approval policy"
            changed.add(task["id"])
        return changed

    async def _turn(self, session: SessionRef, turn_id: str) -> _Turn:
        key = f"{session.session_id}|{turn_id}"
        turn = self._turns.get(key)
        if turn is not None:
            return turn
        turn = _Turn(session=session, turn_id=turn_id)
        # another replica may have followed this turn so far (free in a delivery pass: it read the fields)
        raw = await self.ledger.get(session.session_id, tasks_field(turn_id))
        if raw:
            with contextlib.suppress(ValueError, TypeError):
                saved = json.loads(raw)
                turn.gen, turn.state, turn.tasks = int(saved["gen"]), saved["state"], list(saved["tasks"])
                turn.channel, turn.ts, turn.owner = saved.get("channel", ""), saved.get("ts", ""), saved["owner"]
                turn.unsent = {t["id"] for t in turn.tasks}  # what Slack has of them is unknown: say it again
                turn.ended = list(saved.get("ended") or [])
        self._turns[key] = turn
        if len(self._turns) > TURNS_KEPT:  # turns that ended on another replica: forget the oldest
            oldest = next(iter(self._turns))
            if oldest != key:
                self._drop(self._turns.pop(oldest))
        return turn

    async def _sync(self, turn: _Turn) -> None:
        """Another replica may have opened the turn's stream (this one lost the claim, or the turn was elsewhere)
        or ended it with an answer since this process looked: the record says (read with the pass: free), so the
        stream is carried on and stopped here, and this process's record never hides it."""
        raw = await self.ledger.get(turn.session.session_id, tasks_field(turn.turn_id))
        with contextlib.suppress(ValueError, TypeError, KeyError):
            saved = json.loads(raw) if raw else None
            if saved is None or int(saved["gen"]) < turn.gen:
                return
            if int(saved["gen"]) > turn.gen:  # an answer ended the stream this process knew: the record is newer
                turn.gen, turn.state, turn.tasks = int(saved["gen"]), saved["state"], list(saved["tasks"])
                turn.channel, turn.ts, turn.ended = saved.get("channel", ""), saved.get("ts", ""), saved.get("ended", [])
                turn.unsent = {t["id"] for t in turn.tasks}
            elif saved["state"] == OPEN and turn.state != OPEN:  # opened by another replica: carried on here
                turn.state, turn.channel, turn.ts = OPEN, saved["channel"], saved["ts"]
                turn.unsent = {t["id"] for t in turn.tasks}
        if turn.state != OPEN:  # the record may be another replica's, written over the stream's opener's
            where = await self.ledger.get(turn.session.session_id, f"{tasks_field(turn.turn_id)}:{turn.gen}")
            with contextlib.suppress(ValueError, TypeError, KeyError):
                if where and where.startswith("{"):
                    opened = json.loads(where)
                    turn.state, turn.channel, turn.ts = OPEN, opened["channel"], opened["ts"]
                    turn.unsent = {t["id"] for t in turn.tasks}

    # --- Slack ------------------------------------------------------------------------------------------

    async def _start_later(self, turn: _Turn) -> None:
        try:
            await asyncio.sleep(self.delay_s)
            async with turn.lock:
                turn.timer = None
                if turn.state == NEW and turn.tasks:
                    await self._start(turn)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - tasks are a courtesy: the cards and the answer say it all anyway
            turn.state = OFF
            log.info("tasks not shown for %s", turn.session.session_id, exc_info=True)

    async def _start(self, turn: _Turn) -> None:
        session, sid = turn.session, turn.session.session_id
        team = session.team_id or ""
        if team in self._refused or self.starts.reserve(team, max_wait_s=0) > 0:
            turn.state = OFF  # refused meanwhile, or the workspace's Tier 2 budget is spent: the answer is posted
            return
        # another replica may have delivered the answer meanwhile (the click landed there): no stream then
        raw = await self.ledger.get(sid, tasks_field(turn.turn_id))
        with contextlib.suppress(ValueError, TypeError, KeyError):
            if raw and int(json.loads(raw)["gen"]) != turn.gen:
                turn.state = OFF
                return
        # one stream per turn and answer, across replicas
        claim = f"{tasks_field(turn.turn_id)}:{turn.gen}"
        if not await self.ledger.claim(sid, claim, str(time.time())):
            turn.state = OFF
            return
        client = await self.client_for(session.team_id)
        mode = display_mode(len(turn.tasks))
        chunks = ([plan_chunk()] if mode == "plan" else []) + await self._chunks(turn, all_tasks=True)
        recipient = {"recipient_user_id": turn.owner["user"], "recipient_team_id": turn.owner["team"]} \
            if turn.owner.get("user") else {}
        if self.on_stream is not None:
            self.on_stream(session)
        try:
            resp = await client.chat_startStream(channel=session.channel["channel_id"],
                                                 thread_ts=session.channel["thread_ts"],
                                                 task_display_mode=mode, chunks=chunks, **recipient)
        except SlackApiError as exc:
            turn.state = OFF
            self._refusal(session, exc)
            return
        turn.state, turn.channel, turn.ts = OPEN, resp.get("channel") or session.channel["channel_id"], resp["ts"]
        turn.unsent.clear()
        # where the stream is, under the claim only the one that started it writes: a replica whose record of
        # the turn (written with its own passes) says otherwise still finds it, to carry it on and stop it
        await self.ledger.set(sid, claim, json.dumps({"channel": turn.channel, "ts": turn.ts}))
        await self.ledger.set(sid, tasks_field(turn.turn_id), turn.record())

    async def _flush_later(self, turn: _Turn) -> None:
        try:
            await asyncio.sleep(self.flush_every_s)
            async with turn.lock:
                turn.flusher = None
                if turn.state != OPEN or not turn.unsent:
                    return
                if self.appends.reserve(turn.session.team_id or "", max_wait_s=0) > 0:
                    return  # the workspace's appends are spent for now: they go with the answer
                chunks = await self._chunks(turn)
                client = await self.client_for(turn.session.team_id)
                try:
                    await client.chat_appendStream(channel=turn.channel, ts=turn.ts, chunks=chunks)
                except SlackApiError as exc:
                    if exc.response.get("error") in GONE:
                        turn.state = OFF
                    self._refusal(turn.session, exc)
                    return
                turn.unsent.clear()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a courtesy, as above: the next change or the answer sends them
            log.info("task updates not sent for %s", turn.session.session_id, exc_info=True)

    async def _chunks(self, turn: _Turn, *, all_tasks: bool = False) -> list[dict[str, Any]]:
        """The tasks' chunks (those changed since Slack was told), people named by their handles."""
        tasks = [t for t in turn.tasks if all_tasks or t["id"] in turn.unsent]
        texts = [str(t.get("details") or "") for t in tasks]
        handles: dict[str, str] = {}
        if self.names is not None and (ids := mentioned(texts)):
            handles = await self.names(turn.session, ids)
        return [task_chunk({**t, "details": named(str(t.get("details") or ""), handles) or None}) for t in tasks]

    def _refusal(self, session: SessionRef, exc: SlackApiError) -> None:
        error = exc.response.get("error")
        if error in REFUSED:
            if (session.team_id or "") not in self._refused:
                log.info("no streamed tasks in workspace %s (%s): answers without them", session.team_id, error)
            self._refused.add(session.team_id or "")
        else:
            log.info("tasks of %s not shown: %s", session.session_id, error or exc.response.status_code)

    # --- the answer and the turn's end --------------------------------------------------------------------

    def open_stream(self, session: SessionRef, turn_id: str) -> tuple[str, str] | None:
        """Where this turn's task stream is, if it is open in this process: a step's text streams into it."""
        turn = self._turns.get(f"{session.session_id}|{turn_id}")
        return (turn.channel, turn.ts) if turn is not None and turn.state == OPEN else None

    async def take(self, session: SessionRef, event: MessageCompleted) -> Taken | None:
        """An answer of the turn was committed: it ends the turn's task stream (the answer's ``stopStream``
        carries what the tasks still have to say); calls after it start another. None: no stream is open
        (a quick turn: its tasks are never shown, and its answer is posted whole)."""
        if event.turn_id is None or not self.available(session):
            return None
        turn = self._turns.get(f"{session.session_id}|{event.turn_id}")
        if turn is None:
            raw = await self.ledger.get(session.session_id, tasks_field(event.turn_id))
            if not raw:
                return None  # no call in this turn so far (or it ran on a replica that left no tasks)
            turn = await self._turn(session, event.turn_id)
        async with turn.lock:
            self._cancel_timers(turn)
            await self._sync(turn)
            taken = None
            if turn.state == OPEN:
                taken = Taken(turn.channel, turn.ts, await self._chunks(turn))
            turn.ended += [t["id"] for t in turn.tasks]
            turn.gen, turn.state, turn.tasks, turn.unsent, turn.channel, turn.ts = turn.gen + 1, NEW, [], set(), "", ""
            await self.ledger.set(session.session_id, tasks_field(turn.turn_id), turn.record(), in_pass=True)
            return taken

    async def _end(self, session: SessionRef, turn_id: str, how: str) -> None:
        """The turn ended: a task stream still open (no answer ended it: the turn failed or was stopped) is
        stopped with its tasks' last states; this process forgets the turn."""
        turn = self._turns.pop(f"{session.session_id}|{turn_id}", None)
        if turn is None:
            raw = await self.ledger.get(session.session_id, tasks_field(turn_id))
            if not raw or json.loads(raw).get("state") != OPEN:
                return
            turn = await self._turn(session, turn_id)
            self._turns.pop(f"{session.session_id}|{turn_id}", None)
        async with turn.lock:
            self._cancel_timers(turn)
            await self._sync(turn)
            if turn.state != OPEN:
                return
            for task in turn.tasks:
                if task["status"] in ("pending", "in_progress"):
                    task.update(status="error", details="stopped" if how == "turn.cancelled" else "the turn failed")
                    turn.unsent.add(task["id"])
            turn.state = OFF
            # stopped: no replica carries it on after this (written with the pass's closing round trip)
            await self.ledger.set(session.session_id, f"{tasks_field(turn_id)}:{turn.gen}", OFF, in_pass=True)
            client = await self.client_for(session.team_id)
            try:
                await client.chat_stopStream(channel=turn.channel, ts=turn.ts, chunks=await self._chunks(turn) or None)
            except SlackApiError as exc:
                if exc.response.get("error") not in GONE and not self.stop_later(
                    session, turn.channel, turn.ts, await self._chunks(turn), exc
                ):
                    self._refusal(session, exc)
            await self.ledger.set(session.session_id, tasks_field(turn_id), turn.record(), in_pass=True)

    def _cancel_timers(self, turn: _Turn) -> None:
        for name in ("timer", "flusher"):
            task = getattr(turn, name)
            if task is not None and task is not asyncio.current_task():
                task.cancel()
            setattr(turn, name, None)

    def _drop(self, turn: _Turn) -> None:
        for task in (turn.timer, turn.flusher):
            if task is not None:
                task.cancel()


def _owner(principal: Any) -> dict[str, str]:
    return {"user": principal.slack_user_id,
            "team": principal.attributes.get("user_team_id") or principal.team_id or ""}
