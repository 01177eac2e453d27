"""Every way a request ends names who or what ended it in the audit log, as a Cancel click names its clicker:
the stop button (the person who pressed it), a newer message that steers past the card (its author), expiry
(tests/e2e/test_notices.py), a workspace admin's cancel (tests/e2e/test_words.py)."""

from __future__ import annotations

from bot.models.scripted import ScriptedModel, call, say
from localslack.seed import ALICE, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.test_agent_sessions import slow_refund_script
from tests.e2e.test_approval_flow import RUNS, button, mention_and_wait_for_card, refund_charge

ALICE_ID = f"slack:{TEAM_ID}:{ALICE}"


async def endings(bot) -> dict[str, list]:  # noqa: ANN001
    """The settlement and resolution entries, once the resolution has landed (with the pass's close)."""
    found = await audit_entries(bot.redis.client, TEAM_ID, until=lambda es: any(e.kind == "resolution" for e in es))
    return {kind: [e for e in found if e.kind == kind] for kind in ("settlement", "resolution")}


async def test_a_cancel_click_names_who_cancelled(local_slack, start_app):
    """The yardstick: a Cancel click's settlement and resolution name the clicker."""
    RUNS.clear()
    bot = await start_app(ScriptedModel([call("refund_charge", charge_id="ch_1", amount=5.0), say("Not done.")]),
                          [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "Not done.")
    await bot.wait_idle()
    found = await endings(bot)
    assert [(e.actor, e.data["outcome"]) for e in found["settlement"]] == [(ALICE_ID, "cancelled")]
    assert [(e.actor, e.data["outcome"]) for e in found["resolution"]] == [(ALICE_ID, "denied")]


async def test_the_stop_button_names_who_stopped_the_request(local_slack, start_app):
    """Alice presses stop while her card waits: its settlement says she cancelled it by stopping the turn, and
    its resolution names her and the stop."""
    RUNS.clear()
    bot = await start_app(slow_refund_script(), [refund_charge])
    ts, _ = await mention_and_wait_for_card(local_slack)
    await local_slack.stop_agent_session(ALICE, GENERAL, ts, late=True)
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Stopped" in m.text)
    await bot.wait_idle()
    found = await endings(bot)
    assert [(e.actor, e.data["outcome"], e.data.get("ended_by")) for e in found["settlement"]] == [
        (ALICE_ID, "cancelled", "stop")]
    assert [(e.actor, e.data["outcome"], e.data.get("ended_by")) for e in found["resolution"]] == [
        (ALICE_ID, "cancelled", "stop")]
    assert RUNS == []


async def test_a_typed_stop_that_steers_past_the_card_names_its_author(local_slack, start_app):
    """Alice types "stop" in the thread while her card waits: it is no answer to the card, so it steers the
    turn and the card is no longer needed. Nobody decided the approval (no settlement: it was not cancelled,
    it was passed by); its resolution names her and her message."""
    RUNS.clear()
    bot = await start_app(ScriptedModel([call("refund_charge", charge_id="ch_1", amount=5.0), say("Stopped it.")]),
                          [refund_charge])
    ts, _ = await mention_and_wait_for_card(local_slack)
    await local_slack.post_message(ALICE, GENERAL, "stop", thread_ts=ts)
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: m.text == "Stopped it.")
    await bot.wait_idle()
    found = await endings(bot)
    assert found["settlement"] == []
    assert [(e.actor, e.data["outcome"], e.data.get("ended_by")) for e in found["resolution"]] == [
        (ALICE_ID, "ignored", "message")]
    assert RUNS == []
