"""The bot on a real Redis Cluster (``REDIS_CLUSTER=1``): 3 masters, 1 replica each (tests/cluster.py).

Every test here uses the session's ``valkey_cluster`` (started once, ~2 s) through the ``cluster_redis``
client store/client.py builds for ``REDIS_CLUSTER=1``; the rest of the suite never starts it.
- the engine: a tool approved runs once, a question is answered, the audit log verifies;
- the whole app: a signed mention, the card, a click on Approve, the reply in the thread;
- failover: the master serving a parked turn's slot is killed with SIGKILL; the answer still settles
  and the turn resumes exactly once, and nobody is shown an error;
- the store's other paths: SCANs over every master, the OAuth store's delete, the timers.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from slack_sdk.oauth.installation_store.models.installation import Installation

from bot.approval import always
from bot.builtin import BUILTIN_TOOLS
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turn_commands import Sweep
from bot.engine.turns import Runtime, RuntimeSettings
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from bot.session import session_slot
from localslack.seed import ALICE as SLACK_ALICE
from localslack.seed import GENERAL
from localslack.server import LocalSlack
from store.audit import AuditLog
from store.client import RedisClient
from store.installations import RedisInstallationStore
from store.outbox import RedisOutbox
from store.turns import RedisTurns
from tests.cluster import ValkeyCluster
from tests.e2e.conftest import (
    app_starter,
    local_slack,  # noqa: F401 - the same LocalSlack fixture as the e2e tests
)
from tests.e2e.test_approval_flow import RUNS, button, mention_and_wait_for_card, refund_charge, refund_script
from tests.engine.harness import (
    ALICE,
    RecordingChannel,
    approve,
    make_runtime,
    recording_tool,
    say,
    session,
    shown,
    tool_results,
)

TEAM = "T1"
SOAK = os.environ.get("SOAK") == "1"


def _state_key(session_id: str) -> str:
    return f"hitl:{{{session_slot(session_id)}}}:state"


# --- the engine on the cluster -------------------------------------------------------------------------


async def test_an_approved_tool_runs_once_and_the_turn_completes(cluster_redis: RedisClient) -> None:
    refund, runs = recording_tool("refund", approval=always())
    model = ScriptedModel([call("refund", charge_id="ch_1"), model_say("Done, refunded.")])
    audit = AuditLog(cluster_redis)
    runtime, channel, store = make_runtime(cluster_redis, model, [refund], audit=audit)

    await say(runtime, "refund ch_1")
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]
    [req] = channel.requests()
    result = await approve(runtime, req.request_id)

    assert result.state == "settled"
    assert [r.args for r in runs] == [{"charge_id": "ch_1"}]
    assert channel.types()[-3:] == ["message.completed", "turn.completed", "session.waiting"]
    again = await approve(runtime, req.request_id)
    assert again.state == "stale" and len(runs) == 1
    # the audit consumer wrote the turn's governance events, chained, in the workspace's slot
    kinds = [e.kind for e in await audit.entries(TEAM, limit=None)]
    assert {"request", "settlement", "resolution", "execution"} <= set(kinds)
    report = await audit.verify(TEAM)
    assert report.ok and report.entries == len(kinds), report.problems
    # and the engine's cluster-wide reads (SCAN on every master) see the session
    counts = await store.key_counts()
    assert counts.get("state") == 1 and counts.get("req") == 1
    assert await store.pending_for_team(TEAM) == []


async def test_a_question_is_answered_on_the_cluster(cluster_redis: RedisClient) -> None:
    options = [{"label": "Saturday"}, {"label": "Sunday"}]
    model = ScriptedModel([call("ask_question", call_id="q1", question="Which day?", options=options),
                           model_say("ok")])
    runtime, channel, store = make_runtime(cluster_redis, model, [])
    await say(runtime, "plan it")
    [req] = channel.requests()
    assert await store.teams_with_pending() == [TEAM]  # a SCAN over every master
    assert [r.request_id for r in await store.pending_for_team(TEAM)] == [req.request_id]

    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="Sunday", principal=ALICE))
    await runtime.wait_idle()

    assert result.state == "settled"
    assert json.loads(tool_results(shown(model))["q1"]) == {"status": "answered", "answer": "Sunday"}
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]


async def test_deleting_a_users_installation_works_on_the_cluster(cluster_redis: RedisClient) -> None:
    store = RedisInstallationStore(cluster_redis)
    for user, at in (("U1", 1.0), ("U2", 2.0)):
        await store.async_save(Installation(app_id="A1", team_id="T1", user_id=user, installed_at=at,
                                            bot_token="xoxb-1", user_token=f"xoxp-{user}"))
    await store.async_delete_installation(enterprise_id=None, team_id="T1", user_id="U2")
    latest = await store.async_find_installation(enterprise_id=None, team_id="T1")
    assert latest is not None and latest.user_id == "U1"
    assert await store.async_find_installation(enterprise_id=None, team_id="T1", user_id="U2") is None


async def test_due_timers_are_claimed_once_and_forgotten(cluster_redis: RedisClient) -> None:
    store = RedisTurns(cluster_redis)
    await cluster_redis.zadd(b"hitl:timers", {"expire:x": 1})
    [(member, claim)] = (await store.sweep(Sweep("timers", int(time.time() * 1000)))).timers
    assert member == "expire:x" and (await store.sweep(Sweep("timers", int(time.time() * 1000)))).timers == []
    await store.sweep(Sweep("timer_done", member=member, claim=claim))
    assert await cluster_redis.zcard(b"hitl:timers") == 0


async def test_an_ended_session_is_retired_on_the_cluster(cluster_redis: RedisClient) -> None:
    """Retention: the schedule is claimed in its own slot and each session retired by a
    script in the session's slot, by the sweep or by the message that uses the thread again."""
    store = RedisTurns(cluster_redis, retention_s=0.2)  # type: ignore[arg-type]
    model = ScriptedModel([model_say("one"), model_say("two"), model_say("three")], by_turn_position=False)
    runtime = Runtime(store=store, outbox_store=RedisOutbox(cluster_redis, retention_s=0.2),  # type: ignore[arg-type]
                      model=model, tools=ToolRegistry(list(BUILTIN_TOOLS)), channel=RecordingChannel(),
                      settings=RuntimeSettings(system_prompt=""))
    sid = session().session_id
    await say(runtime, "first")
    await asyncio.sleep(0.4)
    assert not await store.exists(sid) and (await store.sweep(Sweep("retire"))).retired == 1  # the sweep
    assert await cluster_redis.exists(_state_key(sid)) == 0

    await say(runtime, "second")
    await asyncio.sleep(0.4)
    await say(runtime, "third")  # no sweep: the message retires the ended second life first

    assert [m["content"] for m in shown(model) if m["role"] == "user"] == ["third"]
    assert await store.exists(sid)


# --- failover --------------------------------------------------------------------------------------------


async def test_a_parked_turn_rides_out_the_loss_of_its_master(
    valkey_cluster: ValkeyCluster, cluster_redis: RedisClient
) -> None:
    """The answer is sent the moment its master dies: the store retries through the failover (connection
    refused, CLUSTERDOWN, MOVED) and the caller sees one settled answer, the tool one run."""
    refund, runs = recording_tool("refund", approval=always())
    model = ScriptedModel([call("refund", charge_id="ch_1"), model_say("Done, refunded.")])
    runtime, channel, _ = make_runtime(cluster_redis, model, [refund])
    await say(runtime, "refund ch_1")
    [req] = channel.requests()

    master = valkey_cluster.master_of(_state_key(session().session_id))
    valkey_cluster.wait_replicated(master)
    valkey_cluster.kill(master)
    try:
        result = await approve(runtime, req.request_id)
        promoted = valkey_cluster.master_of(_state_key(session().session_id))
    finally:
        valkey_cluster.restart(master)  # the cluster is whole again for the next test

    assert promoted is not master
    assert result.state == "settled"
    assert len(runs) == 1
    assert channel.types()[-3:] == ["message.completed", "turn.completed", "session.waiting"]


@pytest.mark.soak
@pytest.mark.skipif(not SOAK, reason="make soak (SOAK=1): the bounded version is the test above")
async def test_turns_in_every_slot_ride_out_repeated_failovers(
    valkey_cluster: ValkeyCluster, cluster_redis: RedisClient
) -> None:
    """Each round parks 12 turns (spread over every master), kills the master of one of them and answers
    all 12 at once during the failover; every tool runs exactly once, every turn completes."""
    refund, runs = recording_tool("refund", approval=always())
    model = ScriptedModel([call("refund", charge_id="ch"), model_say("Done.")])
    runtime, channel, _ = make_runtime(cluster_redis, model, [refund])
    for round_ in range(6):
        refs = [session(f"r{round_}-{i}") for i in range(12)]
        for ref in refs:
            await say(runtime, "refund", ref=ref)
        parked = channel.requests()[-len(refs):]
        master = valkey_cluster.master_of(_state_key(refs[round_ % len(refs)].session_id))
        valkey_cluster.wait_replicated(master)
        runs_before = len(runs)
        valkey_cluster.kill(master)
        try:
            results = await asyncio.gather(*(approve(runtime, r.request_id) for r in parked))
        finally:
            valkey_cluster.restart(master)
        assert [r.state for r in results] == ["settled"] * len(refs)
        assert len(runs) - runs_before == len(refs)
        assert len(channel.of("turn.completed")) == (round_ + 1) * len(refs)


# --- the whole app ---------------------------------------------------------------------------------------


@pytest.fixture
async def start_clustered_app(
    local_slack: LocalSlack, valkey_cluster: ValkeyCluster, cluster_redis: RedisClient, tmp_path: Any,  # noqa: F811
) -> AsyncIterator[Callable[..., Any]]:
    """``await start(model, tools)`` → the app on ``REDIS_URL=<a cluster node>``, ``REDIS_CLUSTER=1``."""
    async with app_starter(local_slack, valkey_cluster.url, tmp_path, REDIS_CLUSTER="1") as start:
        yield start


async def test_mention_card_approve_reply_on_the_cluster(local_slack: LocalSlack, start_clustered_app) -> None:  # noqa: F811
    RUNS.clear()
    await start_clustered_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)

    clicked = await local_slack.click(SLACK_ALICE, GENERAL, card.ts, button(card, "Approve"))

    assert clicked.status == 200
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert "refunded" in reply.text
    assert RUNS == [{"charge": "ch_1", "principal": "slack:T0LOCAL:U0ALICE"}]
    assert "Approved" in str(local_slack.message(GENERAL, card.ts).blocks)
    assert local_slack.ephemerals(SLACK_ALICE) == []


async def test_the_click_settles_after_a_failover(
    local_slack: LocalSlack, start_clustered_app, valkey_cluster: ValkeyCluster  # noqa: F811
) -> None:
    RUNS.clear()
    bot = await start_clustered_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()
    [record] = await bot.store.pending_for_team("T0LOCAL")
    key = _state_key(record.session_id)
    master = valkey_cluster.master_of(key)
    valkey_cluster.wait_replicated(master)

    valkey_cluster.kill(master)
    try:
        await asyncio.to_thread(valkey_cluster.wait_promoted, master, key)
        clicked = await local_slack.click(SLACK_ALICE, GENERAL, card.ts, button(card, "Approve"))
        reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    finally:
        # in this thread, not a worker's: a node's parent-death signal fires when the *thread* that
        # spawned it exits, and the loop's worker threads end with the test (it killed the node later)
        valkey_cluster.restart(master)

    assert clicked.status == 200
    assert "refunded" in reply.text
    assert RUNS == [{"charge": "ch_1", "principal": "slack:T0LOCAL:U0ALICE"}]
    assert local_slack.ephemerals(SLACK_ALICE) == []
