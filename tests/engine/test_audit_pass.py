"""The audit log rides the delivery pass (store/audit_events.py): what a pass delivered is
audited with its close, each event once, whatever happens to the pass or to the append.

Real Redis, the real outbox: a pass that dies after its Slack posts and before its close, a close that ran
while its audit append failed, two replicas' passes over one session; a process killed right after such a
close (a proxy between it and Redis passes nothing more it says) and sessions whose audit lags when their end
passes.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import redis.asyncio as redis_asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from bot.approval import always
from bot.builtin import BUILTIN_TOOLS
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turn_commands import Sweep
from bot.engine.turns import Runtime, RuntimeSettings
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.session import SessionRef
from bot.tools import Tool, ToolContext
from store.audit import AuditGroup, AuditLog
from store.audit_events import PassAudit
from store.outbox import RedisOutbox
from store.session_keys import OUTBOX
from store.turns import RedisTurns
from tests.engine.harness import (
    ALICE,
    RecordingChannel,
    approve,
    decision,
    make_runtime,
    recording_tool,
    say,
    session,
)

TEAM = "T1"
LEASE_MS = 300
STEADY_LEASE_MS = 10_000  # one replica, no takeover: a loaded machine's slow step must not lose the lease


@dataclass
class HangingChannel(RecordingChannel):
    """A frontend whose Slack call for ``hang_on`` does not return until released (or ever)."""

    hang_on: str = "turn.waiting"
    hanging: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def deliver(self, event, session) -> None:  # noqa: ANN001 - Channel protocol
        if event.type == self.hang_on and not self.release.is_set():
            self.hanging.set()
            await self.release.wait()
        await super().deliver(event, session)


def _replica(client: redis_asyncio.Redis, channel: RecordingChannel | None = None, lease_ms: int = LEASE_MS
             ) -> tuple[Runtime, RecordingChannel, AuditLog]:
    """A runtime whose delivery passes write the audit log it returns."""
    deploy, _ = recording_tool("deploy", approval=always())
    log = AuditLog(client)
    runtime, channel, _ = make_runtime(client, ScriptedModel([call("deploy"), model_say("deployed")]), [deploy],
                                       channel=channel, lease_ms=lease_ms, audit=log)
    return runtime, channel, log


async def _audited(redis: redis_asyncio.Redis) -> Counter[str]:
    log = AuditLog(redis)
    report = await log.verify(TEAM)
    assert report.ok, report.problems
    return Counter(e.kind for e in await log.entries(TEAM, limit=None))


async def _kill(runtime: Runtime, client: redis_asyncio.Redis) -> None:
    """kill -9: nothing the process sends from now on reaches Redis (its pass's close neither)."""
    alive = client.connection_pool
    client.connection_pool = redis_asyncio.ConnectionPool.from_url("unix:///nonexistent/redis.sock")
    await alive.disconnect()
    await runtime.abandon()


async def _approve_and_finish(runtime: Runtime, channel: RecordingChannel) -> None:
    [req] = channel.requests()[-1:]
    result = await approve(runtime, req.request_id)
    assert result.state == "settled"
    await runtime.wait_idle()


ONCE = {"request": 1, "settlement": 1, "resolution": 1, "execution": 1}


async def test_a_pass_killed_after_its_posts_and_before_its_close_is_audited_once_by_the_next(redis, redis_url):
    doomed = redis_asyncio.Redis.from_url(redis_url, retry=Retry(NoBackoff(), 0))
    runtime_a, shown_a, _ = _replica(doomed, HangingChannel())
    await runtime_a.record_message(session(), ALICE, "deploy", message_id="m1")
    await runtime_a.drive(session().session_id)
    await asyncio.wait_for(shown_a.hanging.wait(), 5)  # the card is posted; the pass is in its next Slack call
    assert shown_a.requests()
    await _kill(runtime_a, doomed)
    assert (await _audited(redis))["request"] == 0  # the pass died before its close: nothing audited yet

    runtime_b, channel_b, _ = _replica(redis)
    await asyncio.sleep(LEASE_MS / 1000 + 0.1)  # one lock's life later, any replica's sweep takes over
    await runtime_b.recover()
    await runtime_b.wait_idle()
    assert (await _audited(redis))["request"] == 1
    await _approve_and_finish(runtime_b, channel_b)
    assert {k: v for k, v in (await _audited(redis)).items() if k in ONCE} == ONCE


async def test_a_close_whose_audit_append_failed_is_audited_later_once(redis):
    runtime, channel, log = _replica(redis, lease_ms=STEADY_LEASE_MS)
    await log.append_groups(TEAM, "another", [AuditGroup(event_id="1-1", entries=[("request", None, "r0", {})])])
    await redis.set(AuditLog.head_key(TEAM), "not a hash")  # from now on every append fails (WRONGTYPE)

    await say(runtime, "deploy")

    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]  # the close ran: Slack has it all
    assert await redis.zscore(OUTBOX, session().session_id) is not None  # a pass is due for the audit
    await redis.delete(AuditLog.head_key(TEAM))  # repaired (the head is read back from the stream)
    await redis.zadd(OUTBOX, {session().session_id: 0})  # its retry is due
    await runtime.recover()
    await runtime.wait_idle()
    assert (await _audited(redis))["request"] == 2  # r0 and the card's request, once
    await _approve_and_finish(runtime, channel)
    await runtime.recover()
    audited = await _audited(redis)
    assert {k: audited[k] for k in ONCE} == {**ONCE, "request": 2}
    assert channel.types().count("input.requested") == 1  # Slack was not shown anything twice


async def test_two_replicas_passes_over_one_session_audit_it_once(redis, redis_url):
    other = redis_asyncio.Redis.from_url(redis_url)
    try:
        runtime_a, shown_a, _ = _replica(redis, HangingChannel())
        runtime_b, channel_b, _ = _replica(other)
        await runtime_a.record_message(session(), ALICE, "deploy", message_id="m1")
        await runtime_a.drive(session().session_id)
        await asyncio.wait_for(shown_a.hanging.wait(), 5)  # A's Slack call hangs past its lock's life
        await asyncio.sleep(LEASE_MS / 1000 + 0.1)
        await runtime_b.recover()  # B takes the pass over and closes it, audit and all
        await runtime_b.wait_idle()
        shown_a.release.set()  # A's call returns at last: it closes its pass too, offering the same events
        await runtime_a.wait_idle()
        assert (await _audited(redis))["request"] == 1
        await _approve_and_finish(runtime_b, channel_b)
        await runtime_a.recover()
        await runtime_a.wait_idle()
    finally:
        await other.aclose()
    assert {k: v for k, v in (await _audited(redis)).items() if k in ONCE} == ONCE


async def test_a_close_whose_audit_landed_costs_no_pass_of_its_retry_and_leaves_no_floor(redis):
    """The audit's retry goes with every close that audits (store/outbox.py), and its floor says where the
    audit may lag; when the append landed both are moot, and the next sweep's read of the list drops them in
    the same round trip: no pass runs for them, and the session's floor no longer says its audit lags."""
    runtime, channel, _ = _replica(redis, lease_ms=STEADY_LEASE_MS)
    out = runtime.outbox.store.key(session().session_id, "out")  # type: ignore[attr-defined]
    await say(runtime, "deploy")
    assert (await _audited(redis))["request"] == 1
    assert await redis.zscore(OUTBOX, session().session_id) is not None  # the retry, written with the close
    assert await redis.hget(out, "_audit") is not None

    assert await runtime.outbox.sweep() == 0  # nothing due: the moot retry left with the sweep's read
    assert await redis.zscore(OUTBOX, session().session_id) is None
    assert await redis.hget(out, "_audit") is None
    assert channel.types().count("input.requested") == 1

# --- a process killed between a close whose audit failed and the retry (the retry is the close's) ----------

RETENTION_S = 0.4  # "BOT_RETENTION_DAYS", shortened


class DyingProxy:
    """TCP in front of the tests' server (the embedded one's unix socket, or ``REDIS_URL``'s host), as the
    process sees Redis. ``die_after(marker)``: the round trip whose request holds ``marker`` goes through and is
    answered; then the process is dead to Redis (kill -9): nothing it sends afterwards reaches the server, on
    any connection."""

    def __init__(self, upstream_url: str) -> None:
        upstream = urlsplit(upstream_url)
        self.socket_path = upstream.path if upstream.scheme == "unix" else None
        self.upstream = (upstream.hostname or "127.0.0.1", upstream.port or 6379)
        self.db = (parse_qs(upstream.query).get("db") or [upstream.path.strip("/") if self.socket_path is None
                                                          else ""])[0] or "0"
        self.port = 0
        self.marker: bytes | None = None
        self.answered = False  # the marked round trip's answer is on its way back
        self.dead = False
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def die_after(self, marker: bytes) -> None:
        self.marker = marker

    def revive(self) -> None:
        """A new process, as Redis sees it."""
        self.dead, self.answered, self.marker, self._writers = False, False, None, []

    def _die(self) -> None:
        self.dead = True
        for writer in self._writers:
            writer.close()

    async def stop(self) -> None:
        self._die()
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.dead:
            writer.close()
            return
        up_reader, upstream = (await asyncio.open_unix_connection(self.socket_path) if self.socket_path
                               else await asyncio.open_connection(*self.upstream))
        self._writers += [writer, upstream]
        marked = False

        async def replies() -> None:
            nonlocal marked
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
                if marked:
                    self.answered = True

        back = asyncio.create_task(replies())
        try:
            while data := await reader.read(65536):
                if self.answered:  # the process's next word after the marked round trip: it is dead by then
                    self._die()
                    return
                if self.marker is not None and self.marker in data:
                    marked, self.marker = True, None
                upstream.write(data)
                await upstream.drain()
        except ConnectionError:
            pass
        finally:
            back.cancel()
            upstream.close()
            writer.close()


@dataclass
class _Gate:
    """When the tool started, and when the test lets it finish."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)

    def tool(self) -> Any:
        async def deploy(args: dict, ctx: ToolContext) -> dict:
            self.started.set()
            await self.go.wait()
            return {"deployed": True}

        return Tool(deploy, name="deploy", description="deploy (a test tool)", approval=always())


def _retiring_replica(client, gate: _Gate | None = None) -> tuple[Runtime, RecordingChannel, RedisTurns]:
    """A runtime with the audit on and the retention shortened."""
    deploy = (gate or _Gate()).tool()
    store = RedisTurns(client, lease_ms=LEASE_MS, retention_s=RETENTION_S)
    outbox = RedisOutbox(client, lease_ms=LEASE_MS, retention_s=RETENTION_S, audit=PassAudit(AuditLog(client)))
    channel = RecordingChannel()
    runtime = Runtime(store=store, outbox_store=outbox, model=ScriptedModel([call("deploy"), model_say("deployed")]),
                      tools=ToolRegistry([*BUILTIN_TOOLS, deploy]), channel=channel,
                      settings=RuntimeSettings(system_prompt=""))
    return runtime, channel, store


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[DyingProxy]:
    proxy = DyingProxy(redis_url)
    await proxy.start()
    yield proxy
    await proxy.stop()


async def _killed_after_a_failed_audit(redis: redis_asyncio.Redis, proxy: DyingProxy,
                                      ref: SessionRef | None = None) -> RecordingChannel:
    """Replica A parks a turn and it is approved; while the tool runs the audit's head is broken, so the turn's
    last pass (the execution's) closes with its audit append failed, and A is killed right after that close's
    round trip. The turn ended: nothing more happens in the session."""
    proxy.revive()
    client = redis_asyncio.Redis.from_url(f"redis://127.0.0.1:{proxy.port}/{proxy.db}", retry=Retry(NoBackoff(), 0))
    gate = _Gate()
    runtime_a, channel_a, _ = _retiring_replica(client, gate)
    settled = (await _audited(redis))["settlement"]
    await say(runtime_a, "deploy", ref=ref)
    [req] = channel_a.requests()
    asyncio.get_running_loop().create_task(runtime_a.answer(decision(req.request_id, "approve")))
    await asyncio.wait_for(gate.started.wait(), 5)
    await runtime_a.wait_idle()  # the settle's pass has closed, audited
    assert (await _audited(redis))["settlement"] == settled + 1
    await redis.set(AuditLog.head_key(TEAM), "not a hash")  # from now on every append fails (WRONGTYPE)
    proxy.die_after(b"prev_hash")  # the first round trip with an append in it: the last pass's close
    gate.go.set()
    for _ in range(100):
        if proxy.dead or "turn.completed" in channel_a.types() and proxy.answered:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    await _kill(runtime_a, client)
    assert proxy.answered, "the last pass never closed"
    assert "turn.completed" in channel_a.types()  # Slack showed the answer: the close ran
    await redis.delete(AuditLog.head_key(TEAM))  # repaired (the head is read back from the stream)
    return channel_a


async def test_a_process_killed_after_a_close_whose_audit_failed_leaves_its_retry_and_nothing_is_retired_unaudited(
        redis, proxy):
    await _killed_after_a_failed_audit(redis, proxy)
    assert [e.kind for e in await AuditLog(redis).entries(TEAM, limit=None)].count("execution") == 0  # not yet
    assert await redis.zscore(OUTBOX, session().session_id) is not None, "the close left the audit no retry"

    runtime_b, channel_b, store_b = _retiring_replica(redis)
    await asyncio.sleep(max(RETENTION_S, LEASE_MS / 1000) + 0.2)  # the session's end and the retry are due
    await runtime_b.recover()  # the sweeps (every 2 s in production): retirement, the outbox
    await runtime_b.wait_idle()

    audited = Counter(e.kind for e in await AuditLog(redis).entries(TEAM, limit=None))
    assert {k: audited[k] for k in ONCE} == ONCE, "the session was retired with its execution never audited"
    assert await _audited(redis) == audited  # (the chain verifies)
    assert channel_b.types() == []  # Slack was shown nothing twice
    for _ in range(20):  # and the session is retired once its audit is complete
        await asyncio.sleep(LEASE_MS / 1000)
        await runtime_b.recover()
        if not await store_b.exists(session().session_id) and not await redis.exists(
                store_b.key(session().session_id, "events")):
            break
    assert not await redis.exists(store_b.key(session().session_id, "events")), "never retired"


async def test_a_session_whose_audit_lags_is_retired_neither_by_the_sweep_nor_by_a_message_that_revives_it(
        redis, proxy):
    """Whatever left the audit behind with no retry due (here the retry taken off the list), the session's
    end passing retires nothing the audit lacks: the sweep has a pass offer it first, and a message in the
    thread after the end does not start it afresh over unaudited events."""
    await _killed_after_a_failed_audit(redis, proxy)
    sid = session().session_id
    await redis.zrem(OUTBOX, sid)  # no retry due
    runtime_b, channel_b, store_b = _retiring_replica(redis)
    await asyncio.sleep(RETENTION_S + 0.2)  # the session's end has passed

    await say(runtime_b, "are you there?")  # the thread used again: it would start afresh, its events deleted
    assert Counter(e.kind for e in await AuditLog(redis).entries(TEAM, limit=None))["execution"] == 1, \
        "a message revived the thread over its unaudited events"
    await runtime_b.recover()
    await runtime_b.wait_idle()
    audited = await _audited(redis)
    assert {k: audited[k] for k in ONCE} == ONCE

    await _killed_after_a_failed_audit(redis, proxy, ref=session("s2"))
    await redis.zrem(OUTBOX, session("s2").session_id)
    await asyncio.sleep(RETENTION_S + 0.2)
    events = store_b.key(session("s2").session_id, "events")
    await store_b.sweep(Sweep("retire"))
    assert await redis.exists(events), "the sweep retired a session whose audit lags"
    await runtime_b.recover()  # and has a pass audit it
    await runtime_b.wait_idle()
    assert (await _audited(redis))["execution"] == 2
    await asyncio.sleep(LEASE_MS / 1000 + 0.1)
    await store_b.sweep(Sweep("retire"))
    assert not await redis.exists(events)  # then it is retired
