"""The Slack surface as Slack drives it: questions, dedupe, signatures, Slack Connect, rate limits, bad input."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

from bot.models.scripted import ScriptedModel, call, say
from localslack.seed import ALICE, BOT_USER_ID, ERIN, GENERAL
from store.session_keys import OUTBOX
from tests.e2e.test_approval_flow import (
    RUNS,
    button,
    card_in,
    mention_and_wait_for_card,
    refund_charge,
    refund_script,
)


def question_script() -> ScriptedModel:
    ask = call("ask_question", question="Which day works?",
               options=[{"label": "Saturday"}, {"label": "Sunday"}])

    def answer(messages, tools):
        return say("You said: " + str(messages[-1]["content"]))

    return ScriptedModel([ask, answer])


def widget(message, kind):
    for block in message.blocks or []:
        for element in block.get("elements", []) + ([block["accessory"]] if block.get("accessory") else []):
            if element.get("type") == kind:
                return element
    raise AssertionError(f"no {kind} in {message.blocks}")


async def test_question_answered_by_select(local_slack, start_app):
    await start_app(question_script(), [])
    ts, card = await mention_and_wait_for_card(local_slack, "plan the offsite")
    element = next(e for kind in ("radio_buttons", "static_select") for e in _maybe(card, kind))
    sunday = next(o["value"] for o in element["options"] if "Sunday" in json.dumps(o["text"]))
    await local_slack.select(ALICE, GENERAL, card.ts, element["action_id"], sunday)
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "You said" in m.text)
    assert '"answer": "Sunday"' in reply.text.replace("&quot;", '"')
    updated = local_slack.message(GENERAL, card.ts)
    assert "Sunday" in str(updated.blocks) and f"<@{ALICE}>" in str(updated.blocks)
    assert all(b["type"] != "actions" for b in updated.blocks)


def _maybe(message, kind):
    try:
        return [widget(message, kind)]
    except AssertionError:
        return []


async def test_question_answered_by_modal(local_slack, start_app):
    await start_app(question_script(), [])
    ts, card = await mention_and_wait_for_card(local_slack, "plan the offsite")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Type your own answer"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    input_block = next(b for b in modal.blocks if b["type"] == "input")
    result = await local_slack.submit_view(
        ALICE, modal.id, {input_block["block_id"]: {input_block["element"]["action_id"]: "Friday evening"}}
    )
    assert result.status == 200
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "You said" in m.text)
    assert "Friday evening" in reply.text
    assert "Friday evening" in str(local_slack.message(GENERAL, card.ts).blocks)


async def test_duplicate_and_retried_events_reach_the_model_once(local_slack, start_app):
    model = ScriptedModel([say("hello there")] * 5)
    bot = await start_app(model, [])
    ts, deliveries = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hi")
    assert len(deliveries) == 2, "a mention arrives as app_mention and message"
    # Slack retries the app_mention delivery
    original = deliveries[0].payload
    body = json.dumps(original).encode()
    headers = {**local_slack.sign(body), "Content-Type": "application/json", "X-Slack-Retry-Num": "1",
               "X-Slack-Retry-Reason": "http_timeout"}
    retried = await local_slack.deliver_raw(body, headers)
    assert retried.status == 200
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "hello there" in m.text)
    await bot.wait_idle()
    assert len(model.requests) == 1


async def test_forged_and_stale_signatures_are_refused(local_slack, start_app):
    model = ScriptedModel([say("should not happen")])
    await start_app(model, [])
    event = {"type": "event_callback", "team_id": "T0LOCAL", "event_id": "EvFORGED", "event_time": int(time.time()),
             "authorizations": [{"team_id": "T0LOCAL", "user_id": BOT_USER_ID, "is_bot": True}],
             "event": {"type": "app_mention", "user": ALICE, "channel": GENERAL, "ts": "1767225600.000100",
                       "text": f"<@{BOT_USER_ID}> hi"}}
    body = json.dumps(event).encode()
    forged = {"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=" + "0" * 64,
              "Content-Type": "application/json"}
    assert (await local_slack.deliver_raw(body, forged)).status == 401
    stale = {**local_slack.sign(body, timestamp=int(time.time()) - 600), "Content-Type": "application/json"}
    assert (await local_slack.deliver_raw(body, stale)).status == 401
    assert model.requests == []
    assert local_slack.calls_to("chat.postMessage") == []


async def test_slack_connect_clicker_principal(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    # the workspace admits people from outside (else a guest cannot start a turn at all)
    await bot.deps.governance.policies.set_allow_external("T0LOCAL", True, actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, user=ERIN)
    # erin (from T0OTHER) asked, so erin may approve; her principal is keyed by the installation team
    await local_slack.click(ERIN, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: RUNS)
    assert RUNS == [{"charge": "ch_1", "principal": f"slack:T0LOCAL:{ERIN}"}]


async def test_rate_limited_post_is_retried(local_slack, start_app):
    # the reply is held as Slack asked and the recovery sweep (every replica runs one) posts it after
    await start_app(ScriptedModel([say("after the rate limit")]), [], recovery_interval=0.5)
    local_slack.fail_next("chat.postMessage", status=429, retry_after=1, times=1)
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hi")
    reply = await local_slack.wait_for_message(
        GENERAL, thread_ts=ts, predicate=lambda m: "after the rate limit" in m.text, timeout_s=10)
    assert reply is not None


async def test_failed_card_post_is_reposted(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(refund_script(), [refund_charge])
    local_slack.fail_next("chat.postMessage", error="internal_error", times=20)  # Slack is having a bad minute
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
    await bot.wait_idle()
    assert card_in(local_slack, ts) is None
    local_slack.api.faults.clear()  # Slack is back
    [sid] = await bot.store.redis.zrange(OUTBOX, 0, -1)  # the events stay committed, due for another try
    # due now, instead of sleeping through the backoff
    await bot.store.redis.hdel(bot.store.key(sid.decode(), "out"), "_hold:frontend")
    await bot.store.redis.zadd(OUTBOX, {sid: 0})
    await bot.runtime.recover()
    card = await local_slack.wait_for(lambda: card_in(local_slack, ts))
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: RUNS)


async def test_malformed_and_unknown_interactions_change_nothing(local_slack, start_app):
    RUNS.clear()
    await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    garbage = b"payload=%7Bnot-json"
    status = (await local_slack.deliver_raw(garbage, {**local_slack.sign(garbage),
                                                       "Content-Type": "application/x-www-form-urlencoded"})).status
    assert status in (200, 400)
    payload = {"type": "block_actions", "user": {"id": ALICE, "team_id": "T0LOCAL"}, "team": {"id": "T0LOCAL"},
               "channel": {"id": GENERAL}, "trigger_id": "1.2.3", "container": {"type": "message"},
               "actions": [{"action_id": "hitl:0000000000000000.ffffffffffff:btn:0", "value": "approve",
                            "type": "button", "block_id": "x"}]}
    body = ("payload=" + quote(json.dumps(payload))).encode()
    unknown = await local_slack.deliver_raw(body, {**local_slack.sign(body),
                                                   "Content-Type": "application/x-www-form-urlencoded"})
    assert unknown.status == 200
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "no longer open" in note[-1].text
    assert RUNS == []
    assert any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)


async def test_bot_messages_edits_and_deletes_never_reach_the_agent(local_slack, start_app):
    model = ScriptedModel([say("first")] * 3)
    bot = await start_app(model, [])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hi")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "first" in m.text)
    await bot.wait_idle()
    base = {"type": "event_callback", "team_id": "T0LOCAL", "api_app_id": "A0LOCAL", "event_time": int(time.time()),
            "authorizations": [{"team_id": "T0LOCAL", "user_id": BOT_USER_ID, "is_bot": True}]}
    events = [
        {"type": "message", "subtype": "message_changed", "channel": GENERAL, "channel_type": "channel",
         "ts": "1767225700.000001", "message": {"user": ALICE, "text": "edited", "ts": ts, "thread_ts": ts}},
        {"type": "message", "subtype": "message_deleted", "channel": GENERAL, "channel_type": "channel",
         "ts": "1767225700.000002", "deleted_ts": ts},
        {"type": "message", "channel": GENERAL, "channel_type": "channel", "user": "U0OTHERBOT",
         "bot_id": "B0OTHER", "text": "another bot talking", "ts": "1767225700.000003", "thread_ts": ts},
    ]
    for n, event in enumerate(events):
        body = json.dumps({**base, "event_id": f"EvIGNORED{n}", "event": event}).encode()
        result = await local_slack.deliver_raw(body, {**local_slack.sign(body), "Content-Type": "application/json"})
        assert result.status == 200
    await bot.wait_idle()
    assert len(model.requests) == 1
