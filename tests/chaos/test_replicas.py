"""Two replicas on one Redis: the same click at both at once, and a replica dying mid-turn.

- Same click, two replicas: Alice's one Approve click is posted (signed, as Slack would) to replica A
  and replica B concurrently, plus a duplicate to each (Slack retries, double clicks, a load balancer
  that fans out). The tool must run once, the card settle once, the turn answer once.
- A replica SIGKILLed while its slow tool runs (or right after the tool's effect landed): the other
  replica, which never saw the click, finishes the turn from Redis through its recovery sweep
  (``RECOVERY_INTERVAL_SECONDS`` in bot/app.py), and the call is not run twice.
- Busy turns, Slack slow, clicks at both replicas and one SIGKILLed as the answers land: deliverers take
  sessions over from each other (a pass outlives its lock, or its process dies), and each thread shows its
  answer once: a stream another deliverer ended with the answer counts as delivered; every stream Slack saw
  started was stopped exactly once.

Bounded in ``make test``; ``SOAK=1`` runs more rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from tests.chaos.harness import (
    RESUMING,
    SOAK,
    TOOL_RUNNING,
    Cluster,
    Trial,
    click,
    click_payload,
    final_replies,
    finish,
    open_turn,
    poll,
    problems,
    report,
    unstopped_streams,
)

SAME_CLICK_ROUNDS = 30 if SOAK else 4
FAILOVER_ROUNDS = 10 if SOAK else 2
TURNS_PER_FAILOVER = 3


@pytest.mark.soak
async def test_one_click_delivered_to_two_replicas_runs_the_tool_once(cluster: Cluster, capsys):
    await cluster.start("a")
    await cluster.start("b")
    cluster.route("a")
    trials: list[Trial] = []
    acks: list[int] = []
    for number in range(SAME_CLICK_ROUNDS):
        trial = Trial(key=f"s{number:03d}", idempotent=number % 2 == 1, moment="same_click")
        trials.append(trial)
        await open_turn(cluster.slack, trial)
        payload = await click_payload(cluster.slack, trial)
        acks += await cluster.post_interaction(payload, ["a", "b", "a", "b"])
        await finish(cluster.slack, cluster, trial, reclick_after_s=60)  # no second click from the user

    several_settlements = [t.key for t in trials if len(t.card_outcomes) > 1]
    with capsys.disabled():
        print(
            "\n"
            + report(
                "same click at two replicas",
                trials,
                cluster,
                {
                    "deliveries": len(acks),
                    "acked_200": acks.count(200),
                    "cards_settled_differently": len(several_settlements),
                },
            )
        )
    broken = [f"{t.describe()} -> {problems(t)}" for t in trials if problems(t)]
    assert not broken, "\n".join(broken)
    assert acks.count(200) == len(acks), acks
    # one decision per card: every settled rendering of a card says the same thing
    assert not several_settlements, [(t.key, t.card_outcomes) for t in trials if len(t.card_outcomes) > 1]
    # and the ledger agrees with what the user was told: one effect per approved call
    assert all(t.outcome == "wrote" and t.lines == 1 for t in trials), [t.describe() for t in trials]


@pytest.mark.soak
async def test_replica_killed_mid_turn_the_other_finishes_it(cluster: Cluster, capsys):
    names = ["a", "b"]
    for name in names:
        await cluster.start(name)
    trials: list[Trial] = []
    for number in range(FAILOVER_ROUNDS):
        victim, survivor = names[number % 2], names[(number + 1) % 2]
        moment = TOOL_RUNNING if number % 2 == 0 else RESUMING
        cluster.route(victim)
        batch = [
            Trial(key=f"f{number:03d}n{i}", idempotent=i == TURNS_PER_FAILOVER - 1, moment=moment)
            for i in range(TURNS_PER_FAILOVER)
        ]
        trials += batch
        await asyncio.gather(*(open_turn(cluster.slack, t) for t in batch))
        await asyncio.gather(*(click(cluster.slack, t) for t in batch))
        rows = cluster.starts if moment == TOOL_RUNNING else cluster.ledger
        try:
            await poll(lambda: all(rows(t.key) for t in batch), 15)  # noqa: B023 - awaited in this iteration
        except TimeoutError:
            for t in batch:
                t.notes.append(f"{moment} not reached before the kill")
        cluster.kill(victim, moment)
        cluster.route(survivor)  # the victim stays dead until the survivor has finished its turns
        await asyncio.gather(*(finish(cluster.slack, cluster, t, timeout_s=30) for t in batch))
        await cluster.start(victim)

    with capsys.disabled():
        print("\n" + report("replica killed mid-turn, the other finishes", trials, cluster))
    broken = [f"{t.describe()} -> {problems(t)}" for t in trials if problems(t)]
    assert not broken, "\n".join(broken)


def stream_calls(slack, streams: dict[str, int]) -> list[str]:  # noqa: ANN001
    """What Slack was asked of each stream (to say why one was left open)."""
    return [f"{c.method} {c.params.get('ts') or c.response.get('ts')} {c.response.get('error') or 'ok'} "
            f"{sorted(c.params)}" for c in slack.calls
            if c.method.endswith("Stream") and (c.params.get("ts") or c.response.get("ts")) in streams]


BUSY_ROUNDS = 8 if SOAK else 1  # one round kills a replica as answers land: takeovers, rate limited looks and all
STOPS_SETTLE_S = 60 if SOAK else 10
TURNS_AT_ONCE = 6
# each Slack call takes this long: a pass outlives its lock, and another replica takes the session over
SLACK_AWAY_S = float(os.environ.get("CHAOS_SLACK_AWAY_S") or 0.25)
LOOKS_PER_MINUTE = float(os.environ.get("CHAOS_LOOKS_PER_MINUTE") or 20)


# A known gap, left open: long runs still leave a few task streams open (4-6 of 48). stopStream shares Tier 2 with
# startStream, and a rate limited stop is sent again only from the memory of the replica that tried it, which the
# kill ends. Under SOAK that one check is an expected failure; every other check of the run stays strict.
STREAMS_LEFT_OPEN_UNDER_SOAK = (
    "long runs leave a few task streams open: a rate limited chat.stopStream is retried only from the memory of "
    "the replica that tried it, which the kill ends")


@pytest.mark.soak
async def test_busy_turns_at_two_replicas_one_killed_as_answers_land_answer_once(cluster: Cluster, capsys):
    """Turns in flight together, each click posted to both replicas, Slack slow to answer (passes outlive their
    locks, so replicas take sessions over from each other), and a replica SIGKILLed as the first answers land:
    every thread shows its answer once."""
    names = ["a", "b"]
    for name in names:
        await cluster.start(name)
    cluster.route("a")
    cluster.slack.api.answer_delay_s = SLACK_AWAY_S
    # the looks in a thread that a deliverer taking over makes before posting: Slack limits them hard (apps
    # outside the Marketplace get conversations.replies about once a minute)
    cluster.slack.rate_limits.limit("conversations.replies", per_minute=LOOKS_PER_MINUTE, burst=1)
    trials: list[Trial] = []
    for number in range(BUSY_ROUNDS):
        victim = names[number % 2]
        batch = [Trial(key=f"b{number:03d}n{i}", moment="answer_landing") for i in range(TURNS_AT_ONCE)]
        trials += batch
        await asyncio.gather(*(open_turn(cluster.slack, t) for t in batch))
        payloads = [await click_payload(cluster.slack, t) for t in batch]
        await asyncio.gather(*(cluster.post_interaction(p, names) for p in payloads))
        try:
            await poll(lambda: any(final_replies(cluster.slack, t) for t in batch), 20)  # noqa: B023
        except TimeoutError:
            for t in batch:
                t.notes.append("no answer landed before the kill")
        cluster.kill(victim, "answer_landing")
        cluster.route(names[(number + 1) % 2])
        await cluster.start(victim)
        # late is not lost: a deliverer taking over looks in the thread first, and Slack allows few looks a minute
        await asyncio.gather(*(finish(cluster.slack, cluster, t, timeout_s=120, reclick_after_s=60) for t in batch))
        await asyncio.sleep(2 * SLACK_AWAY_S + 1.0)  # a second post of an answer lands within a pass or two
        for t in batch:
            t.replies = len(final_replies(cluster.slack, t))
    # a stop Slack rate limited (startStream and stopStream share Tier 2) is sent again after its Retry-After
    with contextlib.suppress(TimeoutError):
        await poll(lambda: not unstopped_streams(cluster.slack), STOPS_SETTLE_S)
    streams = {
        "streams_started": len([c for c in cluster.slack.calls_to("chat.startStream") if c.response.get("ok")]),
        "streams_stopped": len([c for c in cluster.slack.calls_to("chat.stopStream") if c.response.get("ok")]),
        "unstopped": unstopped_streams(cluster.slack),
    }

    with capsys.disabled():
        print("\n" + report("busy turns at two replicas, one killed as answers land", trials, cluster, streams))
    broken = [f"{t.describe()} -> {problems(t)}" for t in trials if problems(t)]
    assert not broken, "\n".join(broken)
    # every stream Slack saw started (an answer's, a turn's tasks) was stopped, once: none streams forever
    if SOAK and streams["unstopped"]:
        pytest.xfail(f"{STREAMS_LEFT_OPEN_UNDER_SOAK}: {len(streams['unstopped'])} of them")
    assert not streams["unstopped"], [streams, *stream_calls(cluster.slack, streams["unstopped"])]
