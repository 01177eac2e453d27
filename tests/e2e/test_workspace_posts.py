"""Tools act in their session's workspace (``ctx.workspace``): the demo's announcement really posts.

The post goes to the channel it names, in the session's workspace, once per approval, as plain text
(a model writing ``<!channel>`` does not ping everyone); a channel the agent cannot post in comes back
to the model as a reason, and nothing is posted.
"""

from __future__ import annotations

import asyncio
import json

from bot.approval import Approval, always
from bot.demo_tools import Announcement, post_announcement
from bot.governance import four_eyes
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOB, BOT_USER_ID, FINANCE, GENERAL
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
    await bot.wait_idle()
    posts = _bot_posts(local_slack, FINANCE)[before:]
    assert [p.text for p in posts] == ["Standup moved to 10:00 @channel\n_Posted for @alice, approved by @alice_"]
    result = json.loads(reply.text.removeprefix("Result: "))
    assert result["posted"] is True and result["link"].endswith(posts[0].ts.replace(".", ""))


async def test_a_channel_the_agent_cannot_post_in_is_a_reason_for_the_model_not_a_crash(local_slack, start_app):
    await start_app(_announce("#nowhere", "hello"), [post_announcement])
    ts, card = await mention_and_wait_for_card(local_slack, "announce hello")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    result = json.loads(reply.text.removeprefix("Result: "))
    assert result["posted"] is False and "There is no channel #nowhere the agent can see" in result["error"]


async def test_an_announcement_reads_as_a_message_names_not_tokens_and_says_who_asked_and_approved(local_slack, start_app):
    """People see names where the model wrote ``<@U…>``/``<!here>`` (nobody is pinged: plain text), and who
    asked for the post and who approved it."""
    @tool(name="post_announcement", approval=Approval(request=always(), response=four_eyes()))
    async def announce_four_eyes(args: Announcement, ctx: ToolContext) -> dict:
        """The demo's announcement, approved by someone other than the requester."""
        return await post_announcement.fn(args, ctx)

    await start_app(_announce("#finance", "<!here> ask <@U0CAROL> or <!subteam^S1|@oncall> about <#C0FIN|finance>"),
                    [announce_four_eyes])
    before = len(_bot_posts(local_slack, FINANCE))
    ts, card = await mention_and_wait_for_card(local_slack, "announce it")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    [post] = _bot_posts(local_slack, FINANCE)[before:]
    assert post.text == "@here ask @carol or @oncall about #finance\n_Posted for @alice, approved by @bob_"
    assert "<" not in post.text  # nothing Slack would act on: no mention, broadcast or link token
