"""SLACK_PACING: ``slack`` (the default) keeps inside Slack's per-method tiers; ``off`` adds no
waiting of its own, for apps with raised limits and for benchmarks, yet still honours a 429's Retry-After.

The pacing itself (bursts, then one call per interval) is tested in tests/test_pacing.py; here the real app
posts to a local Slack that records when each call arrived.
"""

from __future__ import annotations

from bot.models.scripted import ScriptedModel, say
from localslack.seed import ALICE, BOT_USER_ID, GENERAL

POSTS = 8  # twice Slack's burst of 4 posts per channel: paced, they would span 3 s or more


def _replies(local_slack, text: str) -> list:
    return [c for c in local_slack.calls_to("chat.postMessage") if c.params.get("text") == text]


async def test_pacing_off_posts_a_burst_in_one_channel_at_once(local_slack, start_app):
    local_slack.rate_limits.enabled = False  # a workspace with raised limits: Slack would not 429 either
    await start_app(ScriptedModel([say("done")]), [], SLACK_PACING="off")
    for i in range(POSTS):
        await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> question {i}")
    try:
        await local_slack.wait_for(lambda: len([c for c in _replies(local_slack, "done") if c.ok]) == POSTS,
                                   timeout_s=5)
    except TimeoutError:
        pass  # the assertion below says how far they got
    posted = [c.at for c in _replies(local_slack, "done")]
    spread = [round(t - posted[0], 2) for t in posted]
    assert len(posted) == POSTS and spread[-1] < 1.0, f"{POSTS} replies in one channel, sent at +{spread} s"


async def test_pacing_off_still_honours_a_429s_retry_after(local_slack, start_app):
    local_slack.rate_limits.enabled = False
    # the held reply is offered again by the recovery sweep (every replica runs one), as in production
    await start_app(ScriptedModel([say("done")]), [], SLACK_PACING="off", recovery_interval=0.2)
    local_slack.fail_next("chat.postMessage", status=429, retry_after=1)
    await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hi")
    await local_slack.wait_for(lambda: any(c.ok for c in _replies(local_slack, "done")), timeout_s=10)
    refused, posted = _replies(local_slack, "done")  # one refusal, one post: no hammering in between
    assert refused.status == 429 and posted.ok
    assert posted.at - refused.at >= 0.95  # Retry-After: 1 was waited out
