"""Answers that appear in Slack as the model writes them (``chat.startStream`` / ``appendStream`` /
``stopStream``), finished by the committed ``message.completed`` event.

The engine hands over the text so far of every model step (``bot.ports.LiveText``); nothing of it is
durable and none of it goes through Redis per delta. Here it is batched:

- a step whose text is complete within ``STREAM_AFTER_S`` is never streamed: its ``message.completed``
  posts it whole, so a quick answer costs one call, as before (and an approve cycle keeps its three);
- a step still writing by then starts a stream with what it has, and appends at most every
  ``APPEND_EVERY_S`` (Tier 4 allows 100+ appends a minute; a stream appends ≤ 60/min), each append ≤ 12,000
  characters;
- the stream's position (channel, ts) is recorded once in Redis beside the session, under the step's own
  field, claimed before ``startStream`` so that two replicas never stream the same step;
- ``message.completed``, delivered by the outbox in whichever replica, finishes it: the replica that
  streamed sends the rest of the text with ``stopStream`` (one call) and the feedback buttons; any other
  (the streaming one was killed mid-answer and another re-ran the step) stops the old stream and replaces
  its text with the whole answer (``chat.update``). A re-run step does not stream a second message.

Where streaming is unavailable (no thread to stream into, as in a DM's main conversation; a workspace or
channel type where Slack refuses ``startStream``) the fallback is post-and-update: the text so far is
posted, edited at most every ``UPDATE_EVERY_S`` (``chat.update`` is Tier 3, paced with the cards' updates),
and ``message.completed`` makes it the whole answer. When even that has no budget left, the answer is
posted whole once complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError

from blocks.answers import MARKDOWN_TEXT, answer_messages, feedback_block
from blocks.limits import MESSAGE_TEXT, truncate_mrkdwn
from blocks.messages import markdown_to_mrkdwn, no_pings, streamable
from blocks.tasks import markdown_chunk
from bot.principals import Principal
from bot.protocol import MessageCompleted
from bot.session import SessionRef
from handlers.delivery.marks import CLAIMED, UNSURE, event_time, post_mark
from handlers.delivery.pacing import Pacer, PacingMode, pacer
from handlers.delivery.tasks import Taken, TaskStreams
from handlers.shared.deps import ClientFor
from store.post_ledger import PostLedger

log = logging.getLogger(__name__)

STREAM_AFTER_S = 1.0  # a step still writing this long after its first words is streamed
APPEND_EVERY_S = 1.0  # appends per stream at most once a second (chat.appendStream is Tier 4)
FINISH_WAIT_S = 10.0  # how long message.completed waits for a startStream/appendStream under way
STARTING = "starting"
STREAM, UPDATE = "stream", "update"
UPDATE_EVERY_S = 2.0  # the fallback edits at most every 2 s: chat.update is Tier 3 and shared with cards
# startStream's answers that mean "no streaming here": the answer is posted and then edited instead
STREAM_UNAVAILABLE = {
    "unknown_method",
    "method_not_supported_for_channel_type",
    "channel_type_not_supported",
    "not_allowed_token_type",
    "missing_scope",
    "not_agent_app",
    "restricted_action",
}
DONE = "done"  # + ":<seq of the message.completed that finished it>"
# what Slack answers when the message to finish is deleted or its stream already ended
MESSAGE_GONE = {"message_not_found", "message_not_in_streaming_state"}


def answer_field(seq: int | None, part: int = 0) -> str:
    """The post ledger field of an answer's ``part``-th message: posted whole, or ended in a stream."""
    return f"post:{seq}:{part}"


def _so_far(md_text: str) -> str:
    """Text still being written, for a plain message (the fallback): mrkdwn, marked as unfinished."""
    return truncate_mrkdwn(markdown_to_mrkdwn(md_text), MESSAGE_TEXT - 2) + " …"


def stream_field(turn_id: str | None, step: int | None) -> str:
    return f"stream:{turn_id}:{step}"


class StreamPacing:
    """Per workspace, as Slack rates these methods: startStream is Tier 2 (20+ a minute), appendStream Tier 4
    (100+). A stream that finds no slot is not started (posted whole) or appends later, in a bigger batch."""

    def __init__(self, mode: PacingMode = "slack") -> None:
        self.starts = pacer(mode, interval_s=3.0, burst=20)
        self.appends = pacer(mode, interval_s=0.6, burst=20)


@dataclass
class _Live:
    """One step being written, in this process."""

    session: SessionRef
    field: str
    owner: Principal | None
    turn_id: str = ""
    text: str = ""  # the whole text so far
    sent: str = ""  # what Slack has of it (startStream + appends)
    channel: str = ""
    ts: str | None = None
    mode: str = "stream"  # "stream" (chat.*Stream) or "update" (the fallback: chat.postMessage + chat.update)
    dead: bool = False  # refused or over the limits: nothing more is sent live
    edited_at: float = 0.0  # the fallback's last edit (monotonic)
    finishing: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    starting: bool = False  # its pump went past its wait: a startStream (or append) may be under way


class LiveAnswers:
    """``bot.ports.LiveText`` for Slack, plus what ``message.completed`` does with a streamed step."""

    def __init__(
        self,
        ledger: PostLedger,
        client_for: ClientFor,
        *,
        stream_after_s: float = STREAM_AFTER_S,
        append_every_s: float = APPEND_EVERY_S,
        on_stream: Callable[[SessionRef], None] | None = None,
        posts: Pacer | None = None,
        updates: Pacer | None = None,
        pacing: StreamPacing | None = None,
        tasks: TaskStreams | None = None,
    ):
        self.tasks = tasks  # the turn's tool calls as tasks (handlers.delivery.tasks): a step's text joins their stream
        self.on_stream = on_stream  # a stream is starting: the answer itself now shows that work goes on
        self.pacing = pacing or StreamPacing()
        self.posts = posts or Pacer(interval_s=1.0, burst=4)  # the fallback's post: SlackPacing.posts
        self.updates = updates or Pacer(interval_s=1.0, burst=20)  # and its edits: SlackPacing.updates
        self._unavailable: set[str] = set()
        self.ledger = ledger
        self.client_for = client_for
        self.stream_after_s = stream_after_s
        self.append_every_s = append_every_s
        self._live: dict[str, _Live] = {}

    # --- the engine's side: text as it is written ---------------------------------------------------

    def text_so_far(
        self, session: SessionRef, turn_id: str, step: int, text: str, owner: Principal | None
    ) -> None:
        if not session.channel.get("channel_id"):
            return  # not a Slack conversation
        if getattr(session, "parent", None):
            return  # a sub-agent's words reach people through its parent, never streamed into the thread
        key = f"{session.session_id}|{stream_field(turn_id, step)}"
        live = self._live.get(key)
        if live is None:
            live = _Live(session=session, field=stream_field(turn_id, step), owner=owner, turn_id=turn_id)
            self._live[key] = live
            live.task = asyncio.create_task(self._pump(live))
            live.task.add_done_callback(lambda t, k=key: self._done(k, t))
        live.text = streamable(text)  # what may be shown of it: nothing it wrote pings anyone, even cut in two

    async def close(self) -> None:
        tasks = [live.task for live in self._live.values() if live.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _done(self, key: str, task: asyncio.Task[None]) -> None:
        live = self._live.get(key)
        if live is not None and live.task is task and live.ts is None and not live.dead:
            self._live.pop(key, None)  # never streamed: nothing for message.completed to finish here
        # (a refused one stays until its message.completed, so later deltas do not try again)

    async def _pump(self, live: _Live) -> None:
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.finishing.wait(), self.stream_after_s)
            if live.finishing.is_set():
                return
            live.starting = True
            if not await self._start(live):
                return
            while not live.finishing.is_set() and not live.dead:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(live.finishing.wait(), self.append_every_s)
                if not live.finishing.is_set():
                    await self._append(live)
        except SlackApiError as exc:
            live.dead = True
            log.info("stopped streaming in %s: %s", live.session.session_id, exc.response.get("error"))
        except Exception:  # noqa: BLE001 - live text is a courtesy: message.completed still shows the answer
            live.dead = True
            log.exception("streaming failed in %s", live.session.session_id)

    async def _start(self, live: _Live) -> bool:
        sid = live.session.session_id
        # one stream per step, across replicas: a re-run after a crash finds the dead one's claim and
        # leaves that stream to message.completed instead of starting a second message
        claim = json.dumps({"state": STARTING, "at": time.time()})
        if not await self.ledger.claim(sid, live.field, claim):
            live.dead = True
            return False
        text = live.text[:MARKDOWN_TEXT]
        channel = live.session.channel
        recipient = {}
        if live.owner is not None and live.owner.slack_user_id:  # "required when streaming to channels"
            recipient = {
                "recipient_user_id": live.owner.slack_user_id,
                "recipient_team_id": live.owner.attributes.get("user_team_id") or live.owner.team_id,
            }
        client = await self.client_for(live.session.team_id)
        try:
            resp = await self._open(live, client, text, recipient)
        except SlackApiError as exc:
            resp = None
            log.info("not showing the answer live in %s: %s", sid, exc.response.get("error"))
        if resp is None:  # nothing was started or posted: the answer is posted whole when complete
            await self.ledger.delete(sid, live.field)
            live.dead = True
            return False
        live.channel, live.ts = resp.get("channel") or channel["channel_id"], resp["ts"]
        live.sent = "" if resp.get("tasks") else text  # a task stream taken over: its text is appended next
        where = {"channel": live.channel, "ts": live.ts, "mode": live.mode, **({"tasks": True} if resp.get("tasks") else {})}
        await self.ledger.set(sid, live.field, json.dumps(where))
        return True

    async def _open(self, live: _Live, client: Any, text: str, recipient: dict[str, Any]) -> Any:
        """startStream where Slack streams; else (no thread to stream into, or refused) post the text so
        far, to be edited as more comes. None when the workspace's budget for either is spent."""
        channel, team = live.session.channel, live.session.team_id or ""
        if self.tasks is not None and (tasks := self.tasks.open_stream(live.session, live.turn_id)):
            return {"channel": tasks[0], "ts": tasks[1], "tasks": True}  # the turn's tasks are streaming: below them
        if channel.get("thread_ts") and STREAM not in self._unavailable:
            if self.pacing.starts.reserve(team, max_wait_s=0) > 0:
                return None  # the workspace's Tier 2 budget is spent
            if self.on_stream is not None:
                self.on_stream(live.session)
            try:
                return await client.chat_startStream(
                    channel=channel["channel_id"],
                    thread_ts=channel["thread_ts"],
                    markdown_text=text,
                    **recipient,
                )
            except SlackApiError as exc:
                if exc.response.get("error") not in STREAM_UNAVAILABLE:
                    raise
                if exc.response.get("error") in ("unknown_method", "not_agent_app"):
                    self._unavailable.add(STREAM)  # this workspace has no streaming at all
        if self.posts.reserve(channel["channel_id"], max_wait_s=0) > 0:
            return None
        live.mode = UPDATE
        if self.on_stream is not None:
            self.on_stream(live.session)
        return await client.chat_postMessage(
            channel=channel["channel_id"], thread_ts=channel.get("thread_ts") or None, text=_so_far(text)
        )

    async def _append(self, live: _Live) -> None:
        if live.mode == UPDATE:
            await self._edit(live)
            return
        text = live.text
        if not text.startswith(live.sent):  # the model started over (a retried request): finish at the end
            live.dead = True
            return
        more = text[len(live.sent) :][:MARKDOWN_TEXT]
        if not more or self.pacing.appends.reserve(live.session.team_id or "", max_wait_s=0) > 0:
            return  # nothing new, or the workspace's appends are spent for now: bigger batches, later
        client = await self.client_for(live.session.team_id)
        await client.chat_appendStream(channel=live.channel, ts=live.ts, markdown_text=more)
        live.sent += more

    async def _edit(self, live: _Live) -> None:
        """The fallback: the posted message shows the text so far (at most every ``UPDATE_EVERY_S``)."""
        if live.text == live.sent or time.monotonic() - live.edited_at < UPDATE_EVERY_S:
            return
        if (
            len(live.text) > MESSAGE_TEXT
            or self.updates.reserve(live.session.team_id or "", max_wait_s=0) > 0
        ):
            return  # too long to edit into one message, or the workspace's chat.update budget is spent
        client = await self.client_for(live.session.team_id)
        text = live.text
        await client.chat_update(channel=live.channel, ts=live.ts, text=_so_far(text))
        live.sent, live.edited_at = text, time.monotonic()

    # --- the outbox's side: the committed answer -----------------------------------------------------

    async def finish(self, session: SessionRef, event: MessageCompleted) -> list[dict[str, object]] | None:
        """Finish the stream of this step, if it had one. Returns None when it had none (post the answer
        whole), else the messages of the answer still to post (only a very long answer has any)."""
        sid, name = session.session_id, stream_field(event.turn_id, event.step)
        live = self._live.pop(f"{sid}|{name}", None)
        if live is not None:
            live.finishing.set()
            # a startStream or append under way lands first; a pump still waiting for its moment ends by
            # itself, and waiting for it would cost the answer several turns of a busy event loop
            if live.task is not None and live.starting:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(live.task), FINISH_WAIT_S)
        raw = await self.ledger.get(sid, name)
        # this answer ends the turn's task stream, if one is open (handlers.delivery.tasks)
        taken = await self.tasks.take(session, event) if self.tasks is not None else None
        if raw and raw.startswith(DONE):  # this step's answer was shown already
            if taken is not None:  # a task stream opened since (a pass redone): it ends too, without text
                await self._stop_tasks(session, taken)
            # the same event again (a repeat delivery) shows nothing; a later step reusing the number (a
            # session-limit "continue" restarts the count) is posted whole
            return [] if raw == f"{DONE}:{event.seq}" else None
        where = json.loads(raw) if raw else {}
        if taken is not None and where.get("ts") != taken.ts:  # the text did not stream into the tasks' message
            if not where:  # nor anywhere: the answer ends the tasks' stream
                return await self._finish_tasks(session, event, taken)
            await self._stop_tasks(session, taken)
            taken = None
        if not raw:
            return None
        if where.get("state") == STARTING:
            # a worker died between startStream and recording where: its message cannot be found, so the
            # answer is posted whole (the claim expires with the session)
            return None
        messages = answer_messages(event.text)
        final = no_pings(event.text)  # as the stream showed its start (``streamable``)
        client = await self.client_for(session.team_id)
        mine = (
            live is not None
            and live.ts == where["ts"]
            and not live.dead
            and where.get("mode", STREAM) == STREAM
        )
        ended = False  # Slack said the stream is over: no second stopStream
        if mine and final.startswith(live.sent) and len(final) <= MARKDOWN_TEXT:  # type: ignore[union-attr]
            rest = final[len(live.sent) :]  # type: ignore[union-attr]
            # the tasks' last states go with it (chunks and markdown_text are not taken together)
            chunks = [*taken.chunks, *([markdown_chunk(rest)] if rest else [])] if taken and taken.chunks else None
            try:
                await client.chat_stopStream(
                    channel=where["channel"],
                    ts=where["ts"],
                    markdown_text=None if chunks else rest or None,
                    chunks=chunks,
                    blocks=[feedback_block()],
                    metadata=post_mark(answer_field(event.seq), event_time(event)),  # found by its post if DONE is lost
                )
                mine, later = True, []
            except SlackApiError as exc:
                if exc.response.get("error") not in MESSAGE_GONE:
                    raise
                mine, ended = False, True  # its stream ended (or it went): make the message the answer below
        else:
            mine = False
        if not mine:
            # posted and edited (the fallback), streamed by a worker that died mid-answer (what it appended
            # is unknown), too long for one message, or a stream Slack ended: stop any stream and make its
            # message the answer
            if where.get("mode", STREAM) == STREAM and not ended:
                with contextlib.suppress(SlackApiError):
                    await client.chat_stopStream(channel=where["channel"], ts=where["ts"],
                                                 chunks=taken.chunks if taken and taken.chunks else None)
            first, *later = messages or [{"text": event.text}]
            try:
                await client.chat_update(
                    channel=where["channel"], ts=where["ts"], text=first["text"], blocks=first.get("blocks")
                )
            except SlackApiError as exc:
                if exc.response.get("error") not in MESSAGE_GONE:
                    raise
                # the message was deleted: the answer is posted anew, whole, unless another deliverer did
                log.info("the answer's message in %s is gone (%s): posting it anew", sid, exc.response.get("error"))
                return await self._post_anew(session, event)
        await self.ledger.set(sid, name, f"{DONE}:{event.seq}", in_pass=True)
        return later  # type: ignore[return-value]

    async def _finish_tasks(
        self, session: SessionRef, event: MessageCompleted, taken: Taken
    ) -> list[dict[str, object]] | None:
        """The answer, not streamed, ends the turn's task stream: one ``stopStream`` with the tasks' last
        states and the whole text (in place of the post a quick answer gets). Too long for one stream
        message, or the message gone: the tasks are stopped and the answer is posted whole."""
        final = no_pings(event.text)
        sid, post = session.session_id, answer_field(event.seq)
        if len(final) > MARKDOWN_TEXT or not await self._claim_answer(sid, post):
            # too long, or another deliverer posted it whole (this pass's lock ran out while its start landed):
            # the tasks end without it, and the post finds the answer it made (or makes it)
            await self._stop_tasks(session, taken)
            return None
        client = await self.client_for(session.team_id)
        try:
            # marked as the answer's post: DONE below is written with the pass's end, and a deliverer that dies
            # before it leaves a careful pass, whose post of the answer finds this message in the thread
            await client.chat_stopStream(channel=taken.channel, ts=taken.ts,
                                         chunks=[*taken.chunks, markdown_chunk(final)], blocks=[feedback_block()],
                                         metadata=post_mark(answer_field(event.seq), event_time(event)))
        except SlackApiError as exc:
            if exc.response.get("error") not in MESSAGE_GONE:
                await self.ledger.delete(sid, post)  # Slack said no: nothing shows the answer yet
                # the stream is taken: the retry posts the answer whole, and the tasks end without it
                self.tasks.stop_later(session, taken.channel, taken.ts, taken.chunks, exc)  # type: ignore[union-attr]
                raise
            # gone, or ended already: by Slack, or by another deliverer's answer (a pass that died, or one whose
            # lock ran out while it went on). The answer is posted unless that one is in the thread
            log.info("the tasks' message in %s is gone (%s): posting the answer", session.session_id,
                     exc.response.get("error"))
            return await self._post_anew(session, event)
        await self.ledger.set(sid, post, json.dumps({"channel": taken.channel, "ts": taken.ts}), in_pass=True)
        await self.ledger.set(sid, stream_field(event.turn_id, event.step), f"{DONE}:{event.seq}", in_pass=True)
        return []

    async def _claim_answer(self, sid: str, post: str) -> bool:
        """Claim the answer's post for the tasks' stop: in the pass's memory while its lock is fresh (no round
        trip), in Redis once it ran out, where the deliverer that took over claimed it if it posted the answer."""
        return await self.ledger.claim(sid, post, f"{CLAIMED}:{time.time():.3f}", in_pass=True)

    async def _post_anew(self, session: SessionRef, event: MessageCompleted) -> None:
        """The answer is to be posted whole, but another deliverer may have shown it already (its stream ended
        with it, or posted anew): its post is claimed as maybe made, so the post looks in the thread first.
        Written to Redis now: a deliverer whose lock ran out claims there, not in this pass's memory."""
        await self.ledger.set(session.session_id, answer_field(event.seq), UNSURE)

    async def _stop_tasks(self, session: SessionRef, taken: Taken) -> None:
        """End the tasks' stream with their last states; the answer goes elsewhere."""
        client = await self.client_for(session.team_id)
        try:
            await client.chat_stopStream(channel=taken.channel, ts=taken.ts, chunks=taken.chunks or None)
        except SlackApiError as exc:  # rate limited or down: sent again later; else ended or gone already
            if self.tasks is not None:
                self.tasks.stop_later(session, taken.channel, taken.ts, taken.chunks, exc)
