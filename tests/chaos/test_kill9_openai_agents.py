"""kill -9 chaos with an OpenAI Agents SDK agent driving the turns (tests/fixtures_tools/ledger_agent_openai.py):
the same rounds, moments and promises as tests/chaos/test_kill9.py, with the SDK between the engine and the
ledger tools. Bounded in ``make test`` (the two moments where the SDK's step is in flight: while the tool
runs and right after its effect, a plain and a safe-to-repeat call each, since every restart pays for
importing the SDK); ``SOAK=1`` runs 100 trials over every moment, ``CHAOS_TRIALS=n`` any number,
``CHAOS_SEED`` replays a run's choices."""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import AsyncIterator

import pytest

from tests.chaos.harness import MOMENTS, RESUMING, SOAK, TOOL_RUNNING, Cluster, Trial, problems, report
from tests.chaos.test_kill9 import run_round

AGENT = "tests.fixtures_tools.ledger_agent_openai:slack_agent"
TRIALS = int(os.environ.get("CHAOS_TRIALS") or (100 if SOAK else 4))
PER_ROUND = 4 if SOAK else 2
KILLED_AT = MOMENTS if SOAK or os.environ.get("CHAOS_TRIALS") else (TOOL_RUNNING, RESUMING)


@pytest.fixture
async def cluster(local_slack, brain, redis, redis_url, tmp_path) -> AsyncIterator[Cluster]:
    group = Cluster(local_slack, brain, redis_url, tmp_path, lease_seconds=1.0, tool_delay=1.0, agent=AGENT)
    try:
        yield group
    finally:
        await group.stop_all()


@pytest.mark.soak
async def test_kill9_at_any_moment_of_an_sdk_turn_loses_none_and_runs_each_call_once(cluster, capsys):
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbits(32))
    rng = random.Random(seed)
    rounds = -(-TRIALS // PER_ROUND)
    moments = [KILLED_AT[i % len(KILLED_AT)] for i in range(rounds)]
    rng.shuffle(moments)
    await cluster.start("bot")
    cluster.route("bot")
    trials: list[Trial] = []
    for number, moment in enumerate(moments):
        batch = [Trial(key=f"k{number:03d}n{i}x{rng.randrange(16**4):04x}", idempotent=i % 2 == 1)
                 for i in range(PER_ROUND)]
        trials += batch
        await run_round(cluster, moment, batch, rng)

    with capsys.disabled():
        print("\n" + report(f"kill -9 chaos, OpenAI Agents SDK agent (seed {seed})", trials, cluster))
    broken = [f"{t.describe()} -> {problems(t)}" for t in trials if problems(t)]
    assert not broken, "\n".join(broken)
