"""A LangChain ``create_agent`` agent with its human-in-the-loop middleware, in Slack, end to end.

Signed Slack requests against the local workspace drive the bot; the agent's model is ``ChatOpenAI`` against
the local OpenAI-compatible server, so the tests read what the model was sent. LangGraph and LangChain run
for real (bot/backends/langgraph.py): their interrupts are our cards, people's clicks resume the thread.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.types import interrupt

from bot.approval import Approval, always
from bot.backends import wrap
from bot.governance import approvers, four_eyes, n_of_m
from bot.models.scripted import ScriptedModel
from localslack.seed import ALICE, BOB, BOT_USER_ID, CAROL, DAVE, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.framework_script import approve_this_card_then_the_next, closed_today
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card
from tests.fakes.openai_server import FakeOpenAI

refunds: list[tuple[str, int]] = []


@tool
def issue_refund(charge_id: str, amount: int) -> str:
    """Refund part or all of a charge."""
    refunds.append((charge_id, amount))
    return f"refunded {amount} EUR on {charge_id}"


@tool
def lookup_charge(charge_id: str) -> str:
    """Look up a charge."""
    return f"{charge_id}: 40 EUR, paid"


@tool
def pick_account(customer: str) -> str:
    """Ask which account the refund goes to."""
    return f"account: {interrupt({'question': f'Which account of {customer}?', 'options': ['card', 'wallet']})}"


@pytest.fixture(autouse=True)
def _no_refunds():
    refunds.clear()


@pytest.fixture
async def fake():
    async with FakeOpenAI(api_key="sk-test") as server:
        yield server


def agent(fake: FakeOpenAI, **hitl: Any) -> Any:
    model = ChatOpenAI(model="gpt-4o-mini", base_url=fake.base_url, api_key="sk-test", max_retries=0)
    gated = hitl or {"issue_refund": {"allowed_decisions": ["approve", "edit", "reject"]}}
    return create_agent(model, tools=[issue_refund, lookup_charge, pick_account],
                        middleware=[HumanInTheLoopMiddleware(interrupt_on=gated)])


def refund_asked(fake: FakeOpenAI, amount: int = 40, then: str = "Done.") -> None:
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": amount}, "call_refund")
    fake.reply_text(then)


def told(fake: FakeOpenAI, call_id: str) -> str:
    """What the model was last told the call returned."""
    [content] = [m["content"] for m in fake.requests[-1].body["messages"]
                 if m["role"] == "tool" and m["tool_call_id"] == call_id]
    return content


async def answer_in(slack, ts, words):
    return await slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: words in m.text)


async def test_approve_runs_the_refund_once_and_the_audit_names_the_approver(local_slack, start_app, fake):
    refund_asked(fake, then="Refunded 40 EUR.")
    bot = await start_app(ScriptedModel([]), [], agent=agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack)
    assert "issue_refund" in json.dumps(card.blocks) and refunds == []

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Refunded 40 EUR.")
    assert refunds == [("ch_1", 40)]
    assert told(fake, "call_refund") == "refunded 40 EUR on ch_1"
    assert "Approved" in json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    [settlement] = await audit_entries(bot.redis.client, TEAM_ID, kind="settlement", until=bool)
    assert settlement.data["outcome"] == "approved" and settlement.actor == f"slack:{TEAM_ID}:{ALICE}"


async def test_cancel_with_a_reason_is_what_the_model_reads(local_slack, start_app, fake):
    refund_asked(fake, then="No refund then.")
    bot = await start_app(ScriptedModel([]), [], agent=agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel with reason"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    [reason] = [b for b in modal.blocks if b["type"] == "input"]
    await local_slack.submit_view(ALICE, modal.id, {reason["block_id"]: {
        reason["element"]["action_id"]: "the customer already got store credit"}})

    await answer_in(local_slack, ts, "No refund then.")
    assert refunds == []
    assert "the customer already got store credit" in told(fake, "call_refund")
    [settlement] = await audit_entries(bot.redis.client, TEAM_ID, kind="settlement", until=bool)
    assert settlement.data["outcome"] == "cancelled"
    assert settlement.data["note"] == "the customer already got store credit"


async def test_edit_and_approve_runs_the_edited_arguments(local_slack, start_app, fake):
    refund_asked(fake, then="Refunded 25 EUR.")
    bot = await start_app(ScriptedModel([]), [], agent=agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Edit & approve"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    fields = {b["block_id"] for b in modal.blocks if b["type"] == "input"}
    assert fields == {"hitl_arg:charge_id", "hitl_arg:amount"}
    assert (await local_slack.submit_view(ALICE, modal.id, {"hitl_arg:amount": {"value": "25"}})).status == 200

    await answer_in(local_slack, ts, "Refunded 25 EUR.")
    assert refunds == [("ch_1", 25)]
    assert told(fake, "call_refund").endswith("refunded 25 EUR on ch_1")
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution", until=bool)
    assert resolution.data["edited_input"] == {"charge_id": "ch_1", "amount": 25}


async def test_a_middleware_that_allows_no_edit_gets_no_edit_button(local_slack, start_app, fake):
    refund_asked(fake)
    await start_app(ScriptedModel([]), [], agent=agent(
        fake, issue_refund={"allowed_decisions": ["approve", "reject"]}))
    _, card = await mention_and_wait_for_card(local_slack)
    assert button(card, "Approve")
    with pytest.raises(AssertionError):
        button(card, "Edit & approve")
    assert "Approve runs `issue_refund` as proposed: this agent takes no changes to its input." in json.dumps(card.blocks)


async def test_a_card_with_edit_and_approve_has_no_as_proposed_line(local_slack, start_app, fake):
    refund_asked(fake)
    await start_app(ScriptedModel([]), [], agent=agent(fake))
    _, card = await mention_and_wait_for_card(local_slack)
    assert button(card, "Edit & approve") and "as proposed" not in json.dumps(card.blocks)


def menu(card) -> dict[str, Any]:
    [element] = [e for b in card.blocks if b["type"] == "actions" for e in b["elements"]
                 if e["type"] == "static_select"]
    return element


async def test_a_tools_question_is_a_menu_and_the_pick_resumes_it(local_slack, start_app, fake):
    fake.reply_tool_call("pick_account", {"customer": "ada"}, "call_pick")
    fake.reply_text("Going to the wallet.")
    await start_app(ScriptedModel([]), [], agent=agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack, "refund ada")
    assert "Which account of ada?" in json.dumps(card.blocks)
    pick = menu(card)
    [wallet] = [o for o in pick["options"] if o["text"]["text"] == "wallet"]

    await local_slack.select(ALICE, GENERAL, card.ts, pick["action_id"], wallet["value"])

    await answer_in(local_slack, ts, "Going to the wallet.")
    assert told(fake, "call_pick") == "account: wallet"


async def test_a_tools_question_answered_by_typing(local_slack, start_app, fake):
    fake.reply_tool_call("pick_account", {"customer": "ada"}, "call_pick")
    fake.reply_text("Going to the bank.")
    await start_app(ScriptedModel([]), [], agent=agent(fake))
    ts, _ = await mention_and_wait_for_card(local_slack, "refund ada")

    await local_slack.post_message(ALICE, GENERAL, "her bank account", thread_ts=ts)

    await answer_in(local_slack, ts, "Going to the bank.")
    assert told(fake, "call_pick") == "account: her bank account"


async def test_four_eyes_on_the_agents_refund(local_slack, start_app, fake):
    refund_asked(fake, then="Refunded.")
    await start_app(ScriptedModel([]), [], agent=wrap(agent(fake), policies={
        "issue_refund": Approval(request=always(), response=four_eyes())}))
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "Four-eyes" in refusal[-1].text and refunds == []
    await local_slack.click(DAVE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Refunded.")
    assert refunds == [("ch_1", 40)]


async def test_two_of_an_approver_list_on_the_agents_refund(local_slack, start_app, fake):
    refund_asked(fake, then="Refunded.")
    bot = await start_app(ScriptedModel([]), [], agent=wrap(agent(fake), policies={
        "issue_refund": Approval(request=always(), response=n_of_m(2, "tool:issue_refund"))}))
    await bot.deps.governance.policies.set_approvers(TEAM_ID, "tool:issue_refund", [BOB, CAROL, DAVE], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for(lambda: "1 of 2" in json.dumps(local_slack.message(GENERAL, card.ts).blocks))
    await bot.wait_idle()
    assert refunds == []
    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Refunded.")
    await bot.wait_idle()
    assert refunds == [("ch_1", 40)]
    approvals = await audit_entries(bot.redis.client, TEAM_ID, kind="settlement", until=bool)
    assert [e.actor for e in approvals][-1:] == [f"slack:{TEAM_ID}:{CAROL}"]


async def test_our_policy_refuses_a_tool_the_middleware_gates_and_no_card_is_shown(local_slack, start_app, fake):
    """The human-in-the-loop middleware interrupts for the refund before any of our code runs; our request policy
    refuses it all the same: no card anyone could approve, and the model reads why."""
    refund_asked(fake, then="Refunds are closed, sorry.")
    await start_app(ScriptedModel([]), [], agent=wrap(agent(fake), policies={
        "issue_refund": Approval(request=closed_today)}))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")

    await answer_in(local_slack, ts, "Refunds are closed, sorry.")
    assert refunds == [] and card_in(local_slack, ts) is None
    assert "Refunds are closed today." in told(fake, "call_refund")


async def test_our_policy_asks_for_a_tool_the_agent_never_gated(local_slack, start_app, fake):
    fake.reply_tool_call("lookup_charge", {"charge_id": "ch_1"}, "call_look")
    fake.reply_text("It is paid.")
    await start_app(ScriptedModel([]), [], agent=wrap(agent(fake), policies={"lookup_charge": always()}))
    ts, card = await mention_and_wait_for_card(local_slack, "look up ch_1")
    assert "lookup_charge" in json.dumps(card.blocks)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "It is paid.")
    assert told(fake, "call_look") == "ch_1: 40 EUR, paid"


async def test_the_stop_button_ends_a_running_agent(local_slack, start_app, fake):
    fake.reply_delay(30)
    bot = await start_app(ScriptedModel([]), [], agent=agent(fake))
    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1")
    await local_slack.wait_for(lambda: local_slack.assistant_state(GENERAL, ts).session_status == "processing")

    await local_slack.stop_agent_session(ALICE, GENERAL, ts)

    await answer_in(local_slack, ts, "Stopped")
    await bot.wait_idle()
    assert refunds == [] and card_in(local_slack, ts) is None


async def test_a_bot_restarted_between_the_card_and_the_click_resumes_the_thread_it_stored(
        local_slack, start_app, fake):
    refund_asked(fake, then="Refunded after the restart.")
    first = await start_app(ScriptedModel([]), [], agent=agent(fake))
    ts, card = await mention_and_wait_for_card(local_slack)
    await first.close()
    await start_app(ScriptedModel([]), [], agent=agent(fake))  # the next process: the same agent, built anew

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

    await answer_in(local_slack, ts, "Refunded after the restart.")
    assert refunds == [("ch_1", 40)]


# --- what the middleware asked, and its "respond" ------------------------------------------------

RESPONDS = {"issue_refund": {"allowed_decisions": ["approve", "reject", "respond"]}}


async def reply_instead(slack, user, card, words):
    await slack.click(user, GENERAL, card.ts, button(card, "Reply instead"))
    [modal] = await slack.wait_for(lambda: slack.open_views(user))
    [typed] = [b for b in modal.blocks if b["type"] == "input"]
    return await slack.submit_view(user, modal.id, {typed["block_id"]: {typed["element"]["action_id"]: words}})


async def test_reply_instead_is_what_the_model_reads_and_the_tool_never_runs(local_slack, start_app, fake):
    refund_asked(fake, then="Store credit it is.")
    bot = await start_app(ScriptedModel([]), [], agent=agent(fake, **RESPONDS))
    ts, card = await mention_and_wait_for_card(local_slack)
    assert "your words go to the agent as `issue_refund`’s result" in json.dumps(card.blocks, ensure_ascii=False)

    assert (await reply_instead(local_slack, ALICE, card, "give her store credit instead")).status == 200

    await answer_in(local_slack, ts, "Store credit it is.")
    assert refunds == []
    assert told(fake, "call_refund") == "give her store credit instead"
    settled = json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert "Replied instead" in settled and "give her store credit instead" in settled
    assert "did not run" in settled
    [settlement] = await audit_entries(bot.redis.client, TEAM_ID, kind="settlement", until=bool)
    assert settlement.data["outcome"] == "responded" and settlement.actor == f"slack:{TEAM_ID}:{ALICE}"
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution", until=bool)
    assert (resolution.data["outcome"], resolution.data["text"]) == ("answered", "give her store credit instead")


async def test_a_reply_from_someone_the_policy_does_not_let_answer_is_refused(local_slack, start_app, fake):
    refund_asked(fake, then="Store credit it is.")
    await start_app(ScriptedModel([]), [], agent=agent(fake, **RESPONDS))  # requester-only: Alice's turn
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Reply instead"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    assert "Only the person who requested" in refusal[-1].text
    assert local_slack.open_views(BOB) == []
    await local_slack.post_message(BOB, GENERAL, "refund her twice", thread_ts=ts)  # Bob's words answer nothing
    assert card_in(local_slack, ts) is not None and len(fake.requests) == 1

    assert (await reply_instead(local_slack, ALICE, card, "store credit")).status == 200
    await answer_in(local_slack, ts, "Store credit it is.")
    assert refunds == [] and told(fake, "call_refund") == "store credit"


async def test_the_requester_may_reply_instead_by_typing_in_the_thread(local_slack, start_app, fake):
    refund_asked(fake, then="Waiting for next week then.")
    await start_app(ScriptedModel([]), [], agent=agent(fake, **RESPONDS))
    ts, _ = await mention_and_wait_for_card(local_slack)

    await local_slack.post_message(ALICE, GENERAL, "not before next week", thread_ts=ts)

    await answer_in(local_slack, ts, "Waiting for next week then.")
    assert refunds == [] and told(fake, "call_refund") == "not before next week"


async def test_the_card_says_what_the_middleware_asked_and_never_its_raw_arguments(local_slack, start_app, fake):
    refund_asked(fake)
    await start_app(ScriptedModel([]), [], agent=agent(fake, issue_refund={
        "allowed_decisions": ["approve", "reject"], "description": "Refunds over 30 EUR need a second look"}))
    _, card = await mention_and_wait_for_card(local_slack)
    [title] = [b["text"]["text"] for b in card.blocks if b.get("block_id", "").endswith(":title:0")]
    assert title == "*Approval needed:* `issue_refund`\nRefunds over 30 EUR need a second look"
    with pytest.raises(AssertionError):
        button(card, "Reply instead")  # the middleware allows no respond here


async def test_the_middlewares_default_description_leaves_the_tools_own_words(local_slack, start_app, fake):
    refund_asked(fake)
    await start_app(ScriptedModel([]), [], agent=agent(fake))
    _, card = await mention_and_wait_for_card(local_slack)
    [title] = [b["text"]["text"] for b in card.blocks if b.get("block_id", "").endswith(":title:0")]
    assert title == "*Approval needed:* `issue_refund`\nRefund part or all of a charge."
    assert "Tool execution requires approval" not in json.dumps(card.blocks) and "Args:" not in json.dumps(card.blocks)


async def test_a_cancel_where_the_middleware_takes_only_respond_reaches_the_model_as_a_rejection(
        local_slack, start_app, fake):
    refund_asked(fake, then="No refund then.")
    await start_app(ScriptedModel([]), [], agent=agent(fake, issue_refund={"allowed_decisions": ["approve", "respond"]}))
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Cancel with reason"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
    [reason] = [b for b in modal.blocks if b["type"] == "input"]
    await local_slack.submit_view(ALICE, modal.id, {reason["block_id"]: {reason["element"]["action_id"]: "duplicate"}})

    await answer_in(local_slack, ts, "No refund then.")
    assert refunds == []
    assert told(fake, "call_refund").startswith("User rejected the tool call for `issue_refund` with reason:")
    assert "duplicate" in told(fake, "call_refund")


async def test_a_middleware_that_takes_no_cancel_gets_no_cancel_button_and_says_so(local_slack, start_app, fake):
    refund_asked(fake, then="Refunded.")
    await start_app(ScriptedModel([]), [], agent=agent(fake, issue_refund={"allowed_decisions": ["approve"]}))
    ts, card = await mention_and_wait_for_card(local_slack)
    labels = [e["text"]["text"] for b in card.blocks if b["type"] == "actions" for e in b["elements"]]
    assert labels == ["Approve"]
    assert "This agent takes no cancel for `issue_refund`" in json.dumps(card.blocks)

    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await answer_in(local_slack, ts, "Refunded.")
    assert refunds == [("ch_1", 40)]


async def test_a_message_past_a_card_that_takes_no_cancel_ends_the_run_plainly(local_slack, start_app, fake):
    refund_asked(fake, then="Never mind then.")
    await start_app(ScriptedModel([]), [], agent=agent(fake, issue_refund={"allowed_decisions": ["approve"]}))
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.post_message(ALICE, GENERAL, "actually, forget it", thread_ts=ts)

    said = await answer_in(local_slack, ts, "takes no cancel")
    assert "`issue_refund` was not approved, and this agent takes no cancel for it" in said.text
    assert "ValueError" not in said.text and refunds == []


async def test_a_middleware_that_takes_no_approval_offers_reply_and_cancel_only(local_slack, start_app, fake):
    refund_asked(fake, then="I will tell finance.")
    await start_app(ScriptedModel([]), [], agent=agent(fake, issue_refund={"allowed_decisions": ["reject", "respond"]}))
    ts, card = await mention_and_wait_for_card(local_slack)
    labels = [e["text"]["text"] for b in card.blocks if b["type"] == "actions" for e in b["elements"]]
    assert labels == ["Reply instead", "Cancel", "Cancel with reason"]
    assert "This agent does not let `issue_refund` run from here" in json.dumps(card.blocks)

    assert (await reply_instead(local_slack, ALICE, card, "ask finance first")).status == 200

    await answer_in(local_slack, ts, "I will tell finance.")
    assert refunds == [] and told(fake, "call_refund") == "ask finance first"


async def test_only_the_approver_list_may_reply_instead(local_slack, start_app, fake):
    refund_asked(fake, then="Finance says store credit.")
    fake.reply_text("Noted.")
    bot = await start_app(ScriptedModel([]), [], agent=wrap(agent(fake, **RESPONDS), policies={
        "issue_refund": Approval(request=always(), response=approvers("tool:issue_refund"))}))
    await bot.deps.governance.policies.set_approvers(TEAM_ID, "tool:issue_refund", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Reply instead"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(CAROL))
    assert "<@U0BOB>" in refusal[-1].text and local_slack.open_views(CAROL) == []

    assert (await reply_instead(local_slack, BOB, card, "store credit, not a refund")).status == 200

    await answer_in(local_slack, ts, "Finance says store credit.")
    assert refunds == [] and told(fake, "call_refund") == "store credit, not a refund"
    settled = json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert "Replied instead" in settled and "<@U0BOB>" in settled


async def test_words_from_a_requester_the_policy_does_not_let_reply_stay_her_message(local_slack, start_app, fake):
    refund_asked(fake, then="unused")
    bot = await start_app(ScriptedModel([]), [], agent=wrap(agent(fake, **RESPONDS), policies={
        "issue_refund": Approval(request=always(), response=approvers("tool:issue_refund"))}))
    await bot.deps.governance.policies.set_approvers(TEAM_ID, "tool:issue_refund", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack)

    await local_slack.post_message(ALICE, GENERAL, "wait, which card was it?", thread_ts=ts)

    # her message steers the turn, as any message of hers would: the card is no longer needed, nobody replied
    await local_slack.wait_for(lambda: "No longer needed" in json.dumps(local_slack.message(GENERAL, card.ts).blocks))
    assert "Replied instead" not in json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert local_slack.ephemerals(ALICE) == [] and refunds == []


async def test_a_server_that_numbers_calls_per_answer_has_each_approved_call_run(local_slack, start_app, fake):
    """Kimi K2 served by vLLM numbers tool calls per answer, ``<tool>:<n>`` with the counter restarting every
    round (github.com/open-webui/open-webui/issues/28570): the same tool called in two rounds comes back under the
    same id. The second is another call: its own card, and approved, it runs (not the first call replayed from its
    execution marker)."""
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_1", "amount": 40}, "issue_refund:0")
    fake.reply_tool_call("issue_refund", {"charge_id": "ch_2", "amount": 30}, "issue_refund:0")
    fake.reply_text("Refunded both.")
    await start_app(ScriptedModel([]), [], agent=agent(fake))
    ts, first = await mention_and_wait_for_card(local_slack, "refund ch_1 and ch_2")
    await approve_this_card_then_the_next(local_slack, ts, first, naming="ch_2")
    await answer_in(local_slack, ts, "Refunded both.")
    assert refunds == [("ch_1", 40), ("ch_2", 30)]
    said = [m["content"] for m in fake.requests[-1].body["messages"] if m["role"] == "tool"]
    assert said == ["refunded 40 EUR on ch_1", "refunded 30 EUR on ch_2"], said


async def test_calls_of_one_answer_under_one_id_each_run(local_slack, start_app, fake):
    """Xinference gives every call of an answer the completion's id (github.com/xorbitsai/inference/issues/4237):
    two refunds in one answer under one id are two calls, each behind its card, each run once."""
    same = "call_f0de99f4-6fe1-4235-b4d9-1fcb010fa197"
    fake.reply_tool_calls(("issue_refund", {"charge_id": "ch_1", "amount": 40}, same),
                          ("issue_refund", {"charge_id": "ch_2", "amount": 30}, same))
    fake.reply_text("Refunded both.")
    await start_app(ScriptedModel([]), [], agent=agent(fake, issue_refund={"allowed_decisions": ["approve"]}))
    ts, _ = await mention_and_wait_for_card(local_slack, "refund ch_1 and ch_2")

    def cards() -> list[Any]:
        return [m for m in local_slack.messages(GENERAL, ts) if m.blocks and "Approve" in json.dumps(m.blocks)]

    await local_slack.wait_for(lambda: len(cards()) == 2)
    for card in cards():
        await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await answer_in(local_slack, ts, "Refunded both.")
    assert sorted(refunds) == [("ch_1", 40), ("ch_2", 30)]
