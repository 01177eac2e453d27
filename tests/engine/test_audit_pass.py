"""The audit log rides the delivery pass (issue 26 items 1-2; store/audit_events.py): what a pass delivered is
audited with its close, each event once, whatever happens to the pass or to the append.

Real Redis, the real outbox: a pass that dies after its Slack posts and before its close, a close that ran
while its audit append failed, two replicas' passes over one session.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

import redis.asyncio as redis_asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from bot.approval import always
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.turns import Runtime
from store.audit import AuditGroup, AuditLog
from store.session_keys import OUTBOX
from tests.engine.harness import ALICE, RecordingChannel, approve, make_runtime, recording_tool, say, session

TEAM = "T1"
LEASE_MS = 300


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


def _replica(client: redis_asyncio.Redis, channel: RecordingChannel | None = None
             ) -> tuple[Runtime, RecordingChannel, AuditLog]:
    """A runtime whose delivery passes write the audit log it returns."""
    deploy, _ = recording_tool("deploy", approval=always())
    log = AuditLog(client)
    runtime, channel, _ = make_runtime(client, ScriptedModel([call("deploy"), model_say("deployed")]), [deploy],
                                       channel=channel, lease_ms=LEASE_MS, audit=log)
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
    for task in list(runtime._tasks):
        task.cancel()
    await asyncio.gather(*runtime._tasks, return_exceptions=True)


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
    runtime, channel, log = _replica(redis)
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
