"""The chaos proofs with a LangGraph agent (bot/backends/langgraph.py): real ``python -m bot run`` processes
running a LangChain agent (``tests.fixtures_tools.ledger_agent_langgraph``), SIGKILLed at each moment of the
approve cycle, and one click delivered to two replicas at once. Every turn is answered once; no call runs
twice; an idempotent call cut short runs again.
"""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import AsyncIterator

import pytest

from tests.chaos.harness import (
    MOMENTS,
    SOAK,
    TOOL_RUNNING,
    Cluster,
    Trial,
    click_payload,
    finish,
    open_turn,
    problems,
    report,
)
from tests.chaos.test_kill9 import run_round

AGENT = "tests.fixtures_tools.ledger_agent_langgraph:agent"
# make test: a kill while the approved tool runs, where the adapter's fence and checkpoints matter (a process
# start costs seconds: LangChain is a large import); make soak: every moment, many times
ROUNDS = int(os.environ.get("CHAOS_ROUNDS") or (40 if SOAK else 1))
BOUNDED_MOMENTS = MOMENTS if SOAK else (TOOL_RUNNING,)
SAME_CLICK_ROUNDS = 6 if SOAK else 1


@pytest.fixture
async def lg_cluster(local_slack, brain, redis, redis_url, tmp_path) -> AsyncIterator[Cluster]:
    group = Cluster(local_slack, brain, redis_url, tmp_path, lease_seconds=1.0, tool_delay=1.0, agent=AGENT)
    try:
        yield group
    finally:
        await group.stop_all()


@pytest.mark.soak
async def test_kill9_at_any_moment_of_a_langgraph_turn_loses_none_and_runs_each_call_once(lg_cluster, capsys):
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbits(32))
    rng = random.Random(seed)
    moments = [BOUNDED_MOMENTS[i % len(BOUNDED_MOMENTS)] for i in range(ROUNDS)]
    rng.shuffle(moments)
    await lg_cluster.start("bot")
    lg_cluster.route("bot")
    trials: list[Trial] = []
    for number, moment in enumerate(moments):
        batch = [Trial(key=f"g{number:03d}n{i}x{rng.randrange(16**4):04x}", idempotent=i == 1) for i in range(2)]
        trials += batch
        await run_round(lg_cluster, moment, batch, rng)

    with capsys.disabled():
        print("\n" + report(f"kill -9 chaos, LangGraph agent (seed {seed})", trials, lg_cluster))
    broken = [f"{t.describe()} -> {problems(t)}" for t in trials if problems(t)]
    assert not broken, "\n".join(broken)


async def test_one_click_at_two_replicas_runs_the_langgraph_tool_once(lg_cluster, capsys):
    await lg_cluster.start("a")
    await lg_cluster.start("b")
    lg_cluster.route("a")
    trials: list[Trial] = []
    acks: list[int] = []
    for number in range(SAME_CLICK_ROUNDS):
        trial = Trial(key=f"gs{number:03d}", idempotent=number % 2 == 1, moment="same_click")
        trials.append(trial)
        await open_turn(lg_cluster.slack, trial)
        payload = await click_payload(lg_cluster.slack, trial)
        acks += await lg_cluster.post_interaction(payload, ["a", "b", "a", "b"])
        await finish(lg_cluster.slack, lg_cluster, trial, reclick_after_s=60)

    with capsys.disabled():
        print("\n" + report("same click at two replicas, LangGraph agent", trials, lg_cluster))
    assert acks.count(200) == len(acks), acks
    assert all(t.outcome == "wrote" and t.lines == 1 and t.executions == 1 for t in trials), [
        t.describe() for t in trials]
