"""What the framework backends' end-to-end tests share: the model's refund script, what the model was told,
the answer in a thread, approving cards in turn, a policy refusing every call (no framework imported here)."""

from __future__ import annotations

import json

from bot.approval import Denied
from localslack.seed import ALICE, GENERAL
from tests.e2e.test_approval_flow import button, card_in
from tests.fakes.openai_server import FakeOpenAI


def refund_then_answer(fake: FakeOpenAI) -> None:
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 500}, "call_refund")
    fake.reply_text("Done: the refund went through.")


def told_the_model(fake: FakeOpenAI, call_id: str) -> str:
    """What the model was last told the call returned."""
    for message in fake.requests[-1].body["messages"]:
        if message["role"] == "tool" and message["tool_call_id"] == call_id:
            return message["content"]
    raise AssertionError(f"the model was not told about {call_id}")


def answer_in(slack, ts, words):  # noqa: ANN001, ANN201 - LocalSlack, its message
    return slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: words in m.text)


async def approve_this_card_then_the_next(slack, ts, card, *, naming: str) -> None:  # noqa: ANN001
    """Approve ``card``, then the next card of the thread (which must name ``naming``), as ALICE."""
    await slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    following = await slack.wait_for(lambda: (c := card_in(slack, ts)) and c.ts != card.ts and c)
    assert naming in json.dumps(following.blocks)
    await slack.click(ALICE, GENERAL, following.ts, button(following, "Approve"))


def closed_today(ctx: object) -> object:
    """A request policy refusing every call, with the reason the model then reads."""
    return Denied("Refunds are closed today.")
