"""Slack's redeliveries against a real Redis: an event is acted on once, and a claim whose act never
ended (its worker died, or the act failed) does not drop the event."""

from __future__ import annotations

import asyncio

from store.slack_events import SlackEvents


async def test_an_event_is_acted_on_once_and_its_redeliveries_are_told_so(redis):
    events = SlackEvents(redis)
    assert await events.claim("Ev1") == "act"
    assert await events.claim("Ev1") == "acting"  # a redelivery while the first acts: not beside it
    await events.acted("Ev1")
    assert await events.claim("Ev1") == "acted"
    assert 3500 < await redis.ttl("hitl:slack-event:{Ev1}") <= 3600  # past Slack's last retry


async def test_a_claim_whose_worker_died_lapses_and_the_next_delivery_acts(redis):
    assert await SlackEvents(redis, acting_s=0.3).claim("Ev2") == "act"  # and its worker is killed
    events = SlackEvents(redis)
    assert await events.claim("Ev2") == "acting"
    await asyncio.sleep(0.4)
    assert await events.claim("Ev2") == "act"


async def test_a_failed_act_lets_the_redelivery_act(redis):
    events = SlackEvents(redis)
    assert await events.claim("Ev3") == "act"
    await events.release("Ev3")
    assert await events.claim("Ev3") == "act"
