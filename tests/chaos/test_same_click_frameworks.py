"""One click delivered to two replicas at once, with a framework's agent driving the turns (BOT_AGENT): the
card settles once and the agent's tool runs once, whichever replica takes it. ``make test`` runs one round
with the pydantic-ai agent; ``make soak`` six with each framework."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.chaos.harness import SOAK, Cluster, Trial, click_payload, finish, open_turn, report

AGENTS = {
    "pydantic-ai": "tests.fixtures_tools.ledger_agent_pydantic_ai:agent",
    "openai-agents": "tests.fixtures_tools.ledger_agent_openai:slack_agent",
    "langgraph": "tests.fixtures_tools.ledger_agent_langgraph:agent",
}
ROUNDS = 6 if SOAK else 1
BOUNDED = ("pydantic-ai",)  # every framework's click takes the one settle path; make soak runs them all


SOAK_ONLY = pytest.mark.skipif(not SOAK, reason="make soak (SOAK=1): make test runs the pydantic-ai agent's round")


@pytest.fixture(params=[pytest.param(name, marks=() if name in BOUNDED else SOAK_ONLY) for name in sorted(AGENTS)])
async def framework_cluster(request, local_slack, brain, redis, redis_url, tmp_path) -> AsyncIterator[Cluster]:
    group = Cluster(local_slack, brain, redis_url, tmp_path, lease_seconds=1.0, tool_delay=1.0,
                    agent=AGENTS[request.param])
    try:
        yield group
    finally:
        await group.stop_all()


@pytest.mark.soak
async def test_one_click_at_two_replicas_runs_the_framework_s_tool_once(framework_cluster, capsys):
    cluster = framework_cluster
    await cluster.start("a")
    await cluster.start("b")
    cluster.route("a")
    trials: list[Trial] = []
    acks: list[int] = []
    for number in range(ROUNDS):
        trial = Trial(key=f"fs{number:03d}", idempotent=number % 2 == 1, moment="same_click")
        trials.append(trial)
        await open_turn(cluster.slack, trial)
        payload = await click_payload(cluster.slack, trial)
        acks += await cluster.post_interaction(payload, ["a", "b", "a", "b"])
        await finish(cluster.slack, cluster, trial, reclick_after_s=60)  # no second click from the user
    with capsys.disabled():
        print("\n" + report(f"same click at two replicas, {cluster.agent}", trials, cluster))
    assert acks.count(200) == len(acks), acks
    assert all(t.outcome == "wrote" and t.lines == 1 and t.executions == 1 for t in trials), [
        t.describe() for t in trials]
