"""kill -9 chaos for a pydantic-ai agent (BOT_AGENT): the same four moments and promises as test_kill9,
with the ledger tools as the agent's own ``requires_approval=True`` tools, run by pydantic-ai inside our
fence. Promises: no lost turn, each approved call's effect at most once (an idempotent one re-run, not
reported interrupted), no live card after the turn ended.

Bounded in ``make test`` (one round per moment); ``SOAK=1`` runs more; ``CHAOS_SEED`` replays a run.
"""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import AsyncIterator

import pytest

from tests.chaos.harness import MOMENTS, SOAK, Cluster, Trial, problems, report
from tests.chaos.test_kill9 import run_round

PER_ROUND = 2
TRIALS = int(os.environ.get("CHAOS_TRIALS") or (80 if SOAK else PER_ROUND * len(MOMENTS)))
ROUNDS = -(-TRIALS // PER_ROUND)


@pytest.fixture
async def pydantic_ai_cluster(local_slack, brain, redis, redis_url, tmp_path) -> AsyncIterator[Cluster]:
    """The chaos cluster with the turns driven by the pydantic-ai agent (BOT_AGENT) instead of BOT_TOOLS."""
    group = Cluster(local_slack, brain, redis_url, tmp_path, lease_seconds=1.0, tool_delay=1.0,
                    agent="tests.fixtures_tools.ledger_agent_pydantic_ai:agent")
    try:
        yield group
    finally:
        await group.stop_all()


@pytest.mark.soak
async def test_kill9_at_any_moment_runs_each_pydantic_ai_call_once(pydantic_ai_cluster, capsys):
    cluster = pydantic_ai_cluster
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbits(32))
    rng = random.Random(seed)
    moments = [MOMENTS[i % len(MOMENTS)] for i in range(ROUNDS)]
    rng.shuffle(moments)
    await cluster.start("bot")
    cluster.route("bot")
    trials: list[Trial] = []
    for number, moment in enumerate(moments):
        batch = [Trial(key=f"p{number:03d}n{i}x{rng.randrange(16**4):04x}", idempotent=i % 2 == 1)
                 for i in range(PER_ROUND)]
        trials += batch
        await run_round(cluster, moment, batch, rng)

    with capsys.disabled():
        print("\n" + report(f"kill -9 chaos, pydantic-ai agent (seed {seed})", trials, cluster))
    broken = [f"{t.describe()} -> {problems(t)}" for t in trials if problems(t)]
    assert not broken, "\n".join(broken)
