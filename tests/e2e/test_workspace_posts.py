"""Tools act in their session's workspace (``ctx.workspace``): the demo's announcement really posts.

The post goes to the channel it names, in the session's workspace, once per approval, as plain text
(a model writing ``<!channel>`` does not ping everyone); a channel the agent cannot post in comes back
to the model as a reason, and nothing is posted.
"""

from __future__ import annotations

import asyncio
import json

from bot.demo_tools import post_announcement
from bot.models.scripted import ScriptedModel, call, say
from localslack.seed import ALICE, BOT_USER_ID, FINANCE, GENERAL
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card


def _announce(channel: str, text: str) -> ScriptedModel:
    return ScriptedModel([call("post_announcement", channel=channel, text=text),
                          lambda messages, tools: say("Result: " + str(messages[-1]["content"]))])


def _bot_posts(slack, channel: str) -> list:
    return [m for m in slack.messages(channel) if m.user == BOT_USER_ID and not m.thread_ts]


async def test_an_approved_announcement_is_posted_once_in_the_channel_it_names(local_slack, start_app):
    bot = await start_app(_announce("#finance", "Standup moved to 10:00 <!channel>"), [post_announcement])
    before = len(_bot_posts(local_slack, FINANCE))
    ts, card = await mention_and_wait_for_card(local_slack, "announce standup moved")
    assert _bot_posts(local_slack, FINANCE)[before:] == []  # nothing before the approval
    approve = button(card, "Approve")
    await asyncio.gather(*(local_slack.click(ALICE, GENERAL, card.ts, approve) for _ in range(4)))
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.runtime.wait_idle()
    posts = _bot_posts(local_slack, FINANCE)[before:]
    assert [p.text for p in posts] == ["Standup moved to 10:00 &lt;!channel&gt;"]  # once, and shown, not pinging
    result = json.loads(reply.text.removeprefix("Result: "))
    assert result["posted"] is True and result["link"].endswith(posts[0].ts.replace(".", ""))


async def test_a_channel_the_agent_cannot_post_in_is_a_reason_for_the_model_not_a_crash(local_slack, start_app):
    await start_app(_announce("#nowhere", "hello"), [post_announcement])
    ts, card = await mention_and_wait_for_card(local_slack, "announce hello")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    result = json.loads(reply.text.removeprefix("Result: "))
    assert result["posted"] is False and "There is no channel #nowhere the agent can see" in result["error"]
