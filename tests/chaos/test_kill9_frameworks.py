"""kill -9 chaos with a framework's agent driving the turns (BOT_AGENT): the rounds, moments and promises of
test_kill9.py, with pydantic-ai, the OpenAI Agents SDK or LangGraph between the engine and the ledger tools
(tests/fixtures_tools/ledger_agent_<framework>.py), each tool run by its framework inside our fence.

Promises per turn: no lost turn; each approved call's effect at most once (a non-idempotent call cut short
is reported interrupted, an idempotent one runs again); no live card after the turn ended.

Bounded in ``make test``: the pydantic-ai agent, one kill while the approved tool runs (where the framework's
fence matters), a plain and a safe-to-repeat call (every start pays for importing the framework; the OpenAI
Agents SDK's kill has its own bounded proof, tests/e2e/test_backend_openai_agents_kill9.py). ``SOAK=1`` runs
every framework at every moment many times, ``CHAOS_TRIALS=n`` any number, ``CHAOS_SEED`` replays a run.
"""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import AsyncIterator

import pytest

from tests.chaos.harness import MOMENTS, SOAK, TOOL_RUNNING, Cluster, Trial, problems, report
from tests.chaos.test_kill9 import run_round

AGENTS = {
    "pydantic-ai": "tests.fixtures_tools.ledger_agent_pydantic_ai:agent",
    "openai-agents": "tests.fixtures_tools.ledger_agent_openai:slack_agent",
    "langgraph": "tests.fixtures_tools.ledger_agent_langgraph:agent",
}
PER_ROUND = 2
LONG = SOAK or bool(os.environ.get("CHAOS_TRIALS"))
TRIALS = int(os.environ.get("CHAOS_TRIALS") or (80 if SOAK else 2))
KILLED_AT = MOMENTS if LONG else (TOOL_RUNNING,)
# every framework runs its tools inside the engine's one fence (bot/engine/framework_turns.py; each adapter's
# wiring of it: tests/backends/); make soak kills them all
BOUNDED = ("pydantic-ai",)
LONG_ONLY = pytest.mark.skipif(not LONG, reason="make soak (SOAK=1) or CHAOS_TRIALS: make test kills the pydantic-ai agent")


@pytest.fixture(params=[pytest.param(name, marks=() if name in BOUNDED else LONG_ONLY) for name in sorted(AGENTS)])
async def framework_cluster(request, local_slack, brain, redis, redis_url, tmp_path) -> AsyncIterator[Cluster]:
    group = Cluster(local_slack, brain, redis_url, tmp_path, lease_seconds=1.0, tool_delay=1.0,
                    agent=AGENTS[request.param])
    try:
        yield group
    finally:
        await group.stop_all()


@pytest.mark.soak
async def test_kill9_at_any_moment_of_a_framework_s_turn_loses_none_and_runs_each_call_once(framework_cluster,
                                                                                          capsys):
    cluster = framework_cluster
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbits(32))
    rng = random.Random(seed)
    rounds = -(-TRIALS // PER_ROUND)
    moments = [KILLED_AT[i % len(KILLED_AT)] for i in range(rounds)]
    rng.shuffle(moments)
    await cluster.start("bot")
    cluster.route("bot")
    trials: list[Trial] = []
    for number, moment in enumerate(moments):
        batch = [Trial(key=f"f{number:03d}n{i}x{rng.randrange(16**4):04x}", idempotent=i % 2 == 1)
                 for i in range(PER_ROUND)]
        trials += batch
        await run_round(cluster, moment, batch, rng)

    with capsys.disabled():
        print("\n" + report(f"kill -9 chaos, {cluster.agent} (seed {seed})", trials, cluster))
    broken = [f"{t.describe()} -> {problems(t)}" for t in trials if problems(t)]
    assert not broken, "\n".join(broken)
