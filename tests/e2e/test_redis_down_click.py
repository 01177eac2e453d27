"""A click while Redis is down (issue 25 item 22): answered in time, privately, and counted.

Slack does not retry interactivity requests and shows a bare failure on anything but a 2xx, so a click
that cannot be recorded is answered 200 within the 3 s ack and the clicker alone reads "I couldn't record
that — try again in a moment" (an ephemeral message where the card is). Each is counted in
``hitl_slack_store_unavailable_total``. Once Redis is back the same click works.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from blocks.actions import FREEFORM_ACTION_ID, FREEFORM_BLOCK_ID, FREEFORM_CALLBACK_ID, modal_metadata
from handlers.outage import TRY_AGAIN
from localslack.seed import ALICE, GENERAL
from localslack.server import LocalSlack
from store.embedded import EmbeddedValkey
from tests.e2e import slack_kinds
from tests.e2e.test_approval_flow import RUNS, button, mention_and_wait_for_card, refund_charge, refund_script
from tests.e2e.test_every_payload import post
from tests.e2e.test_redis_restart import start_on, valkey  # noqa: F401 (fixtures)

COULD_NOT_RECORD = "I couldn't record that — try again in a moment"
assert TRY_AGAIN.startswith(COULD_NOT_RECORD)


async def unavailable_count(url: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{url}/metrics")).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("hitl_slack_store_unavailable_total{"))


async def test_a_click_while_redis_is_down_is_answered_200_with_a_private_try_again(
    local_slack: LocalSlack, start_on: Callable[..., Any], valkey: EmbeddedValkey  # noqa: F811
) -> None:
    RUNS.clear()
    bot = await start_on(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await bot.runtime.wait_idle()
    before = await unavailable_count(bot.url)

    await valkey.stop()
    started = time.monotonic()
    result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    assert result.status == 200, result  # not a 500: Slack would show a bare failure
    assert time.monotonic() - started < 3.0, "answered within Slack's 3 s"
    note = await local_slack.wait_for(
        lambda: next((e for e in local_slack.ephemerals(ALICE) if COULD_NOT_RECORD in e.text), None), timeout_s=5)
    assert note.channel == GENERAL
    assert await unavailable_count(bot.url) == before + 1
    assert RUNS == []

    await valkey.start()  # back: the same click goes through, once
    result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    assert result.status == 200, result
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert "refunded" in reply.text
    await bot.runtime.wait_idle()
    assert RUNS == [{"charge": "ch_1", "principal": "slack:T0LOCAL:U0ALICE"}]


def freeform_submission(kinds: dict[str, tuple[dict[str, Any], str]]) -> tuple[dict[str, Any], str]:
    """The "type your own answer" modal of a card, submitted (its listener reads the request first)."""
    payload, content_type = kinds["view_submission"]
    view = {**payload["view"], "callback_id": FREEFORM_CALLBACK_ID,
            "private_metadata": modal_metadata("0123456789abcdef.feedface", GENERAL, "1767225602.000600"),
            "blocks": [{"type": "input", "block_id": FREEFORM_BLOCK_ID, "label": {"type": "plain_text", "text": "Answer"},
                        "element": {"type": "plain_text_input", "action_id": FREEFORM_ACTION_ID}}],
            "state": {"values": {FREEFORM_BLOCK_ID: {FREEFORM_ACTION_ID: {"type": "plain_text_input", "value": "yes"}}}}}
    return {**payload, "view": view}, content_type


async def test_while_redis_is_down_a_modal_keeps_its_answer_with_a_note_and_an_event_is_left_to_slack_retries(
    local_slack: LocalSlack, start_on: Callable[..., Any], valkey: EmbeddedValkey  # noqa: F811
) -> None:
    bot = await start_on(refund_script(), [refund_charge])
    kinds = slack_kinds.kinds()
    await valkey.stop()
    async with httpx.AsyncClient(base_url=bot.url, timeout=10) as http:
        command = await post(http, *kinds["slash command /approvers"])
        assert command.status_code == 200, command.text  # acknowledged; its answer follows once it can
        # a click on App Home's buttons, with Redis down: 200, and the person is told by direct message
        # a typed answer submitted in its modal: the modal stays open with the note under the field
        before = await unavailable_count(bot.url)
        submitted = await post(http, *freeform_submission(kinds))
        assert submitted.status_code == 200, submitted.text
        assert submitted.json() == {"response_action": "errors", "errors": {FREEFORM_BLOCK_ID: TRY_AGAIN}}
        assert await unavailable_count(bot.url) == before + 1
        # an event is not a person waiting on a click: its 5xx makes Slack deliver it again later
        mention = await post(http, *kinds["event app_mention"])
        assert mention.status_code >= 500, mention.text
