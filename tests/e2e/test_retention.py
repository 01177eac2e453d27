"""Retention as Slack sees it, with ``BOT_RETENTION_DAYS`` set to one second:
a card approved after the retention passed still runs its call, and a conversation grant that lapsed
with its conversation leaves App Home."""

from __future__ import annotations

import asyncio
import json

from bot.models.scripted import ScriptedModel, call
from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.e2e.test_approval_flow import (
    RUNS,
    button,
    card_in,
    mention_and_wait_for_card,
    refund_charge,
    refund_script,
)
from tests.e2e.test_governance import find, open_home
from tests.e2e.test_grants import clear_cache, replied, replying

ONE_SECOND = str(1 / 86400)  # BOT_RETENTION_DAYS


async def test_a_card_approved_after_the_retention_still_runs_its_call(local_slack, start_app):
    RUNS.clear()
    await start_app(refund_script(), [refund_charge], BOT_RETENTION_DAYS=ONE_SECOND)
    ts, card = await mention_and_wait_for_card(local_slack)
    await asyncio.sleep(1.5)  # the card waits longer than the retention

    result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    assert result.status == 200
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert "refunded" in reply.text and len(RUNS) == 1
    assert "Approved" in str(local_slack.message(GENERAL, card.ts).blocks)


async def test_a_lapsed_conversation_grant_leaves_app_home(local_slack, start_app):
    await start_app(ScriptedModel([call("clear_cache"), replying]), [clear_cache], BOT_RETENTION_DAYS=ONE_SECOND)
    ts, card = await mention_and_wait_for_card(local_slack, "clear the cache")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve, don’t ask again here"))
    await replied(local_slack, ts)
    home = await open_home(local_slack, ALICE)
    assert find(home.blocks, "grants:revoke") is not None, json.dumps(home.blocks)

    await asyncio.sleep(2)  # the conversation's retention passes, and its grant with it

    home = await open_home(local_slack, ALICE)
    assert find(home.blocks, "grants:revoke") is None, "a lapsed conversation grant is still offered in App Home"


async def test_a_card_whose_turn_is_gone_says_so_and_is_updated(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()
    await bot.store.redis.delete(bot.store.key(f"slack:T0LOCAL:{GENERAL}:{ts}", "state"))  # its turn is gone

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    note = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "no longer needed" in note[-1].text and RUNS == []
    await local_slack.wait_for(lambda: "No longer needed" in str(local_slack.message(GENERAL, card.ts).blocks))
    assert all(b["type"] != "actions" for b in local_slack.message(GENERAL, card.ts).blocks)


async def test_an_assistant_thread_keeps_its_title_while_its_request_is_open(local_slack, start_app):
    """What the bot remembers of an assistant thread (its title is claimed, the channel looked at) belongs to
    the thread's session: nothing of it ends while a request is open. A second message after the retention
    passed, with the card still waiting, leaves the thread's title as the first message named it."""
    RUNS.clear()
    await start_app(refund_script(), [refund_charge], BOT_RETENTION_DAYS=ONE_SECOND)
    dm, thread_ts, _ = await local_slack.open_assistant(ALICE, context_channel=GENERAL)
    await local_slack.post_message(ALICE, dm, "Refund ch_1 for me please", thread_ts=thread_ts)
    card = await local_slack.wait_for(lambda: card_in(local_slack, thread_ts, channel=dm))
    assert local_slack.assistant_state(dm, thread_ts).title == "Refund ch_1 for me please"
    await asyncio.sleep(1.5)  # the card waits longer than the retention

    await local_slack.post_message(ALICE, dm, f"<@{BOT_USER_ID}> and thanks", thread_ts=thread_ts)
    await local_slack.wait_for(lambda: "Approve" not in str(local_slack.message(dm, card.ts).blocks))
    titles = [c.params.get("title") for c in local_slack.calls if c.method == "assistant.threads.setTitle"]
    assert titles == ["Refund ch_1 for me please"], "the thread was named again: what named it had ended"
