"""kill -9 chaos: a real bot process is SIGKILLed in the middle of approved turns, again and again.

Each round opens a few turns at once ("ledger K" → approval card), brings them all to one of four
moments — before the click, right after the click is acked, while the slow tool runs, right after the
tool's effect landed (resuming) — kills the process, starts a fresh one on the same Redis and lets a
patient user finish (clicking again only if a card still offers Approve after a while).

Promises checked per turn (what a user and the ledger observe):
- 0 lost turns: a final reply arrives;
- every approved call runs exactly once: the ledger holds one line for K, or none only when the reply
  says the call was interrupted and not re-run (the documented outcome for a non-idempotent tool killed
  mid-run; an idempotent tool is re-run instead and still writes one line);
- 0 live cards: no message of the thread keeps Approve/Cancel buttons after the turn ended.

Bounded in ``make test`` (12 trials); ``SOAK=1`` runs 200; ``CHAOS_TRIALS=n`` any number.
``CHAOS_SEED`` replays a run's choices (moments, order, jitter).
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets

import pytest

from tests.chaos.harness import (
    AFTER_ACK,
    BEFORE_CLICK,
    MOMENTS,
    RESUMING,
    SOAK,
    TOOL_RUNNING,
    Cluster,
    Trial,
    click,
    finish,
    open_turn,
    poll,
    problems,
    report,
)

TRIALS = int(os.environ.get("CHAOS_TRIALS") or (200 if SOAK else 12))
PER_ROUND = 4 if SOAK else 3  # turns in flight together when the process dies
# randomness inside each moment's window: after an ack or a tool's effect the process still has a few
# hundred milliseconds of work (settle, render, checkpoint, model, reply); the kill lands anywhere in it
JITTER_S = {BEFORE_CLICK: 0.05, AFTER_ACK: 0.25, TOOL_RUNNING: 0.05, RESUMING: 0.25}


async def bring_to(moment: str, cluster: Cluster, trials: list[Trial]) -> None:
    """Drive every trial of the round to ``moment`` (the card is already showing)."""
    if moment == BEFORE_CLICK:
        return
    await asyncio.gather(*(click(cluster.slack, t) for t in trials))  # returns once Slack got each ack
    try:
        if moment == TOOL_RUNNING:
            await poll(lambda: all(cluster.starts(t.key) for t in trials), 15)
        elif moment == RESUMING:
            await poll(lambda: all(cluster.ledger(t.key) for t in trials), 15)
    except TimeoutError:
        for t in trials:
            t.notes.append(f"{moment} not reached before the kill")


async def run_round(cluster: Cluster, moment: str, trials: list[Trial], rng: random.Random) -> None:
    for t in trials:
        t.moment = moment
    await asyncio.gather(*(open_turn(cluster.slack, t) for t in trials))
    await bring_to(moment, cluster, trials)
    await asyncio.sleep(rng.uniform(0, JITTER_S[moment]))
    cluster.kill("bot", moment)
    await cluster.start("bot")  # a new process; it shares nothing with the dead one but Redis
    await asyncio.gather(*(finish(cluster.slack, cluster, t) for t in trials))


@pytest.mark.soak
async def test_kill9_at_any_moment_loses_no_turn_and_runs_each_call_once(cluster, capsys):
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbits(32))
    rng = random.Random(seed)
    rounds = -(-TRIALS // PER_ROUND)
    # every moment equally often, in a random order
    moments = [MOMENTS[i % len(MOMENTS)] for i in range(rounds)]
    rng.shuffle(moments)
    await cluster.start("bot")
    cluster.route("bot")
    trials: list[Trial] = []
    for number, moment in enumerate(moments):
        batch = [
            Trial(key=f"k{number:03d}n{i}x{rng.randrange(16**4):04x}", idempotent=i % 3 == 2)
            for i in range(PER_ROUND)
        ]
        trials += batch
        await run_round(cluster, moment, batch, rng)

    with capsys.disabled():
        print("\n" + report(f"kill -9 chaos (seed {seed})", trials, cluster))
    broken = [f"{t.describe()} -> {problems(t)}" for t in trials if problems(t)]
    assert not broken, "\n".join(broken)
