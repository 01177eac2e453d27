"""Threads in a group DM (mpim) work like threads in a channel: the manifest grants `mpim:history` and
subscribes to `message.mpim`, and LocalSlack refuses `conversations.*` on a group DM without it."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from localslack.seed import ALICE, BOB, BOT_TOKEN, BOT_USER_ID
from tests.e2e.test_approval_flow import RUNS, button, card_in, refund_charge, refund_script

GROUP_DM = "G0ALICEBOB"


async def test_a_mention_in_a_group_dm_gets_a_card_and_an_answer_in_its_thread(local_slack, start_app):
    RUNS.clear()
    local_slack.add_channel(GROUP_DM, "mpdm-alice--bob--agent-1", members=[ALICE, BOB], is_mpim=True)
    await start_app(refund_script(), [refund_charge])
    ts, deliveries = await local_slack.post_message(ALICE, GROUP_DM, f"<@{BOT_USER_ID}> refund ch_1 please")
    assert deliveries and all(d.status == 200 for d in deliveries)
    card = await local_slack.wait_for(lambda: card_in(local_slack, ts, channel=GROUP_DM))
    await local_slack.click(ALICE, GROUP_DM, card.ts, button(card, "Approve"))
    reply = await local_slack.wait_for_message(GROUP_DM, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert reply.thread_ts == ts and len(RUNS) == 1


async def test_group_dm_calls_need_the_group_dm_scopes(local_slack):
    local_slack.add_channel(GROUP_DM, "mpdm-alice--bob--agent-1", members=[ALICE, BOB], is_mpim=True)
    client = AsyncWebClient(token=BOT_TOKEN, base_url=local_slack.api_url)
    history = await client.conversations_history(channel=GROUP_DM)  # mpim:history: granted by manifest.yml
    assert history["ok"]
    with pytest.raises(SlackApiError) as refused:  # mpim:read: not granted (the bot never needs it)
        await client.conversations_info(channel=GROUP_DM)
    assert refused.value.response["error"] == "missing_scope" and refused.value.response["needed"] == "mpim:read"
