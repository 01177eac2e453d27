"""A write whose reply is lost is resent by the client; it must still apply once (store.replay.replay_safe).

A proxy between the store and a real valkey-server forwards a command to the server, then throws the
reply away and closes the client's connection, exactly once: the server applied the write, the client
saw "Connection closed by server" and, as store/client.py tells it to, sends the same command again on
a new connection. Each test shows what a caller would get without the guard.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.engine.turn_commands import CallMark, CommitCommand, RecordMessage, TakeMessage
from bot.protocol import MessageCompleted
from store.audit import AuditLog
from store.client import open_redis
from store.embedded import EmbeddedValkey
from store.outbox import RedisOutbox
from store.replay import replay_safe
from store.turns import RedisTurns
from tests.engine.harness import take_lease


class ReplyLosingProxy:
    """TCP in front of a unix-socket server; ``lose_next_reply()`` drops the next reply and the connection."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.port = 0
        self.lose = False
        self.lost = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    def lose_next_reply(self) -> None:
        self.lose = True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, upstream = await asyncio.open_unix_connection(self.socket_path)
        try:
            while data := await reader.read(65536):
                upstream.write(data)
                await upstream.drain()
                reply = await up_reader.read(65536)
                if self.lose:  # the server did the work; the client never hears of it
                    self.lose = False
                    self.lost += 1
                    return
                writer.write(reply)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            upstream.close()
            writer.close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hitl-rp-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def proxied(short_dir: Path) -> AsyncIterator[tuple[RedisTurns, RedisOutbox, ReplyLosingProxy]]:
    server = EmbeddedValkey(short_dir)
    url = await server.start()
    proxy = ReplyLosingProxy(url.removeprefix("unix://").split("?")[0])
    await proxy.start()
    handle = await open_redis(f"redis://127.0.0.1:{proxy.port}/0")
    try:
        store = RedisTurns(handle.client)
        await warm_up(store)
        await AuditLog(handle.client).append("T0WARM", "request", actor="U0ALICE")
        yield store, RedisOutbox(handle.client), proxy
    finally:
        await handle.close()
        await proxy.stop()
        await server.stop()


async def warm_up(store: RedisTurns) -> None:
    """Use every script once on another session, so the lost reply is the operation's, not a NOSCRIPT."""
    other = "slack:T0LOCAL:C0RANDOM:9.000009"
    await store.record_message(RecordMessage(other, {"text": "hi"}, None))
    await store.take_message(TakeMessage(other, {"text": "hi"}))
    token = await take_lease(store, other)
    assert token is not None
    await store.mark_call(CallMark(other, "warm", token))
    await store.commit(CommitCommand(other, None, None, [MessageCompleted(session_id=other, turn_id="turn_0", text="hi")]))


SID = "slack:T0LOCAL:C0GENERAL:1.000001"
MESSAGE = {"text": "refund ch_1 please", "principal": None}


async def test_a_taken_message_whose_answer_was_lost_is_still_taken_by_its_taker(proxied) -> None:
    store, outbox, proxy = proxied
    assert await store.record_message(RecordMessage(SID, MESSAGE, "C0GENERAL:1.000001"))
    proxy.lose_next_reply()
    # without the guard the resent LREM finds nothing and answers 0: the caller drops the message
    assert await store.take_message(TakeMessage(SID, MESSAGE)) is True
    assert proxy.lost == 1
    assert await store.inbox(SID) == []
    assert await store.take_message(TakeMessage(SID, MESSAGE)) is False  # a real second taker still gets nothing


async def test_a_tool_start_whose_answer_was_lost_is_still_ours(proxied) -> None:
    store, outbox, proxy = proxied
    token = await take_lease(store, SID)
    assert token is not None
    proxy.lose_next_reply()
    # without the guard the resent SET NX answers "already started": the call is reported interrupted
    assert await store.mark_call(CallMark(SID, "turn_1:step_1:call_0:0", token)) == (True, None)
    assert proxy.lost == 1
    fresh, recorded = await store.mark_call(CallMark(SID, "turn_1:step_1:call_0:0", token))
    assert not fresh and recorded and recorded.startswith("started")


async def test_a_commit_whose_answer_was_lost_appends_its_events_once(proxied) -> None:
    store, outbox, proxy = proxied
    event = MessageCompleted(session_id=SID, turn_id="turn_1", text="Refunded ch_1.")
    proxy.lose_next_reply()
    committed = (await store.commit(CommitCommand(SID, None, None, [event]))).events
    assert proxy.lost == 1
    begun = await outbox.outbox_begin(SID, ["frontend"], "deliverer")
    assert begun is not None
    assert [e.type for _, e in begun.entries] == ["message.completed"]  # once, not twice
    assert committed[0].seq == begun.entries[0][1].seq


async def test_a_delivery_pass_whose_answer_was_lost_still_starts(proxied) -> None:
    store, outbox, proxy = proxied
    said = MessageCompleted(session_id=SID, turn_id="turn_1", text="Refunded ch_1.")
    await store.commit(CommitCommand(SID, None, None, [said]))
    proxy.lose_next_reply()
    # the resent copy finds the deliverer lock taken, by us: without that, the session would wait out
    # the lock's life (a lease) before anyone delivered it
    begun = await outbox.outbox_begin(SID, ["frontend"], "deliverer")
    assert proxy.lost == 1
    assert begun is not None and [e.type for _, e in begun.entries] == ["message.completed"]
    assert await outbox.outbox_begin(SID, ["frontend"], "someone else") is None


async def test_an_audit_entry_whose_answer_was_lost_is_written_once(proxied) -> None:
    store, outbox, proxy = proxied
    audit = AuditLog(store.redis)
    proxy.lose_next_reply()
    await audit.append("T0LOCAL", "settle", actor="U0BOB", subject="req_1", data={"outcome": "approved"})
    assert proxy.lost == 1
    entries = await audit.entries("T0LOCAL")
    assert [(e.kind, e.subject) for e in entries] == [("settle", "req_1")]  # once, and the chain is whole
    assert (await audit.verify("T0LOCAL")).ok


async def test_the_body_never_sees_the_mark_and_a_resent_copy_gets_the_first_answer(redis) -> None:
    counting = redis.register_script(replay_safe(
        "return {#KEYS, #ARGV, redis.call('INCR', KEYS[1]), ARGV[1]}"))
    keys, args = ["hitl:{s1}:n", "hitl:{s1}:once:abc"], ["x", 60_000]
    first = await counting(keys=keys, args=args)
    assert first == [1, 1, 1, b"x"]  # one key and one argument: the mark and its lifetime are hidden
    assert await counting(keys=keys, args=args) == first  # the same invocation again: not applied twice
    assert await redis.get("hitl:{s1}:n") == b"1"
    assert (await counting(keys=["hitl:{s1}:n", "hitl:{s1}:once:def"], args=args))[2] == 2  # a new one is


async def test_a_message_record_whose_answer_was_lost_is_queued_once_and_holds_its_lease(proxied) -> None:
    store, outbox, proxy = proxied
    proxy.lose_next_reply()
    # the resent copy finds the dedupe mark its first copy wrote (store.replay.replay_own): without that it
    # would answer "a repeat" and the message would never be driven
    recorded = await store.record_message(RecordMessage(SID, MESSAGE, "C0GENERAL:1.000001", "lease"))
    assert proxy.lost == 1
    assert recorded is not None
    seen, held = recorded
    assert held is not None and await store.redis.get(store.key(SID, "lease")) == held.token.encode()
    assert await store.inbox(SID) == [MESSAGE] and seen.inbox == [MESSAGE]  # queued once
    assert await store.record_message(RecordMessage(SID, MESSAGE, "C0GENERAL:1.000001", "lease")) is None  # a repeat


async def test_a_message_without_an_id_whose_answer_was_lost_is_queued_once(proxied) -> None:
    store, outbox, proxy = proxied
    proxy.lose_next_reply()
    assert await store.record_message(RecordMessage(SID, MESSAGE, None))
    assert proxy.lost == 1
    assert await store.inbox(SID) == [MESSAGE]


async def test_a_settle_whose_answer_was_lost_settles_once_and_holds_its_lease(proxied) -> None:
    from bot.protocol import InputResponse, SettleCommand
    from tests.engine.harness import ALICE, make_runtime, say
    from tests.engine.test_decisions import refund_charge, script

    store, outbox, proxy = proxied
    runtime, channel, _ = make_runtime(store.redis, script(), [refund_charge])
    await say(runtime, "refund ch_1")
    [req] = channel.requests()
    record = await store.get_request(req.request_id)
    response = InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE)
    proxy.lose_next_reply()
    # the resent copy finds its mark with the request's record (store.replay.replay_own): without it, it
    # would answer "stale" and nobody would resume the turn until the sweep
    settled = await store.settle(SettleCommand(record, mode="settle", outcome="approved", response=response,
                                               on_settled=(MessageCompleted(session_id=record.session_id,
                                                                            turn_id="t", text="settled"),),
                                               lease=True))
    assert proxy.lost == 1
    assert settled.state == "settled" and settled.batch_complete and settled.held is not None
    assert await store.redis.get(store.key(record.session_id, "lease")) == settled.held.token.encode()
    texts = [e.text for e in await store.events(record.session_id) if isinstance(e, MessageCompleted)]
    assert texts.count("settled") == 1  # its events once
    again = SettleCommand(record, mode="settle", outcome="approved", response=response)
    assert (await store.settle(again)).state == "stale"


async def test_a_lease_holder_s_commit_whose_answer_was_lost_applies_once_and_keeps_the_lease(proxied) -> None:
    store, outbox, proxy = proxied
    token = await take_lease(store, SID)
    assert token is not None
    event = MessageCompleted(session_id=SID, turn_id="turn_1", text="Refunded ch_1.")
    proxy.lose_next_reply()
    # the resent copy finds its mark in the session's outbox hash (store.replay.replay_own)
    committed = (await store.commit(CommitCommand(SID, token, {"turn": None}, [event]))).events
    assert proxy.lost == 1
    texts = [e.text for e in await store.events(SID) if isinstance(e, MessageCompleted)]
    assert texts == ["Refunded ch_1."] and committed[0].seq == 1  # once
    assert await store.redis.get(store.key(SID, "lease")) == token.encode()
    again = (await store.commit(CommitCommand(SID, token, {"turn": None}, [event]))).events  # a new checkpoint still applies
    assert again[0].seq == 2


async def test_a_releasing_commit_whose_answer_was_lost_is_not_refused(proxied) -> None:
    store, outbox, proxy = proxied
    token = await take_lease(store, SID)
    assert token is not None
    proxy.lose_next_reply()
    # the first copy let the lease go: the resent one must not answer "lease lost"
    await store.commit(CommitCommand(SID, token, {"turn": None}, [MessageCompleted(session_id=SID, turn_id="t", text="end")],
                       release=True))
    assert proxy.lost == 1
    assert await store.redis.get(store.key(SID, "lease")) is None
    assert [e.text for e in await store.events(SID) if isinstance(e, MessageCompleted)] == ["end"]
