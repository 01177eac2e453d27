"""Start fast (issue 26 item 6): a restarted bot reads only what its first sweep needs.

What Redis sees (INFO commandstats) while a bot starts and runs its start-up sweep: no SCAN or KEYS
(nothing is listed at start), and the same commands whether 1 or 5 turns are parked (the start does not
grow with the parked population; the 10,000-turn figures are in docs/PERFORMANCE.md, "Start fast").
"""

from __future__ import annotations

from collections import Counter

from bot.models.scripted import ScriptedModel, call
from localslack.seed import ALICE, GENERAL
from tests.e2e.test_approval_flow import mention_and_wait_for_card, refund_charge

IGNORED = {"info", "config|resetstat", "config|get"}  # the test's own


async def _park(local_slack, start_app, turns: int) -> None:
    bot = await start_app(ScriptedModel([call("refund_charge", charge_id=f"ch_{n}", amount=1.0) for n in range(turns)]),
                          [refund_charge])
    for n in range(turns):
        await mention_and_wait_for_card(local_slack, f"refund ch_{n} please", user=ALICE)
    await bot.runtime.wait_idle()
    await bot.close()


async def _commands_of_a_start(start_app, redis) -> Counter[str]:
    await redis.config_resetstat()
    bot = await start_app(ScriptedModel([]), [refund_charge])  # returns after its start-up sweep
    await bot.runtime.wait_idle()
    stats = await redis.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()
                    if name.removeprefix("cmdstat_") not in IGNORED})


async def test_a_start_lists_nothing_and_reads_the_same_with_more_turns_parked(local_slack, start_app, redis):
    await _park(local_slack, start_app, 1)
    with_one = await _commands_of_a_start(start_app, redis)
    await _park(local_slack, start_app, 4)
    assert len(local_slack.messages(GENERAL)) == 5
    with_five = await _commands_of_a_start(start_app, redis)

    assert not {"scan", "keys", "hscan", "sscan", "zscan"} & (set(with_one) | set(with_five)), with_five
    assert with_five == with_one, f"one parked: {dict(with_one)}; five parked: {dict(with_five)}"
