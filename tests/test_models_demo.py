"""The offline demo model (bot/models/demo.py): what someone trying `make run` without a key gets."""

from __future__ import annotations

import json

import pytest

from bot.models.base import ToolSpec
from bot.models.demo import DemoModel

TOOLS = [ToolSpec(name="refund_charge", description="Refund a charge.", parameters={})]


async def reply_to(text: str):  # noqa: ANN201
    return await DemoModel().complete([{"role": "user", "content": text}], TOOLS)


@pytest.mark.parametrize(("text", "amount"), [("refund ch_1001 $40", 40.0), ("please refund ch_77 12.50", 12.5)])
async def test_a_refund_with_an_amount_asks_for_approval_of_that_amount(text, amount):
    [call] = (await reply_to(text)).tool_calls
    assert call.name == "refund_charge" and json.loads(call.arguments)["amount"] == amount


async def test_a_refund_without_an_amount_asks_for_it_instead_of_inventing_one():
    response = await reply_to("refund ch_1001")
    assert not response.tool_calls and "How much should I refund on `ch_1001`?" in response.text


@pytest.mark.parametrize("text", ["refund ch_1001 -$40", "refund ch_1001 $-5", "refund ch_1 $0"])
async def test_a_negative_or_zero_refund_is_refused_not_turned_positive(text):
    response = await reply_to(text)
    assert not response.tool_calls and "has to be a positive amount" in response.text


async def test_a_refund_approved_with_changes_is_reported_with_the_amount_that_ran():
    ran = {"refund_id": "re_1", "charge_id": "ch_1001", "amount": 30.0, "status": "succeeded"}
    edited = {"note": "slack:T1:UBOB changed the arguments before approving; it ran with these.",
              "arguments": {"charge_id": "ch_1001", "amount": 30.0}, "result": json.dumps(ran)}
    messages = [{"role": "user", "content": "refund ch_1001 $40"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "refund_charge", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": json.dumps(edited)}]
    response = await DemoModel().complete(messages, TOOLS)
    assert response.text.startswith("Refunded $30.00 on `ch_1001`")
    assert "changed the request before approving" in response.text


async def test_a_cancel_reason_is_relayed_as_the_approvers_words_without_their_internal_id():
    denied = {"code": "TOOL_EXECUTION_DENIED", "message": "The refund was not approved.",
              "note": 'slack:T0LOCAL:U0BOB wrote: "Refunds over $50 need a ticket."'}
    messages = [{"role": "user", "content": "refund ch_1001 $75"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "refund_charge", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": json.dumps(denied)}]
    response = await DemoModel().complete(messages, TOOLS)
    assert response.text == ("I didn't do it: it was not approved. "
                             'The approver wrote: "Refunds over $50 need a ticket."')


async def test_a_denial_written_for_the_model_is_not_repeated_to_people():
    denied = {"code": "TOOL_EXECUTION_DENIED", "tool": {"result": "not_run"},
              "message": "The refund was not approved. Tell the customer it is under review; do not retry.",
              "approval": {"requestId": "r1", "status": "denied"}}
    messages = [{"role": "user", "content": "refund ch_1001 $75"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "refund_charge", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": json.dumps(denied)}]
    response = await DemoModel().complete(messages, TOOLS)
    assert response.text == "I didn't do it: it was not approved."


async def test_every_demo_tools_example_prompt_makes_the_demo_call_that_tool():
    # the assistant thread offers these as suggested prompts: each must work offline as offered
    from bot.demo_tools import deploy_service, lookup_customer, post_announcement, refund_charge

    tools = [lookup_customer, refund_charge, deploy_service, post_announcement]
    specs = [ToolSpec(name=t.name, description=t.description, parameters={}) for t in tools]
    for t in tools:
        [call] = (await DemoModel().complete([{"role": "user", "content": t.example}], specs)).tool_calls
        assert call.name == t.name


async def test_look_up_a_customer_without_a_name_is_not_a_customer_called_a():
    specs = [ToolSpec(name="lookup_customer", description="Look up a customer.", parameters={})]
    reply = await DemoModel().complete([{"role": "user", "content": "look up a customer's plan"}], specs)
    assert reply.tool_calls == []


async def test_a_customer_it_cannot_find_is_said_in_words_with_the_ones_it_knows():
    from bot.demo_tools import lookup_customer

    found = await lookup_customer.invoke(lookup_customer.parse('{"name": "zorg"}'), None)  # type: ignore[arg-type]  # it reads no context
    messages = [{"role": "user", "content": "look up zorg"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "lookup_customer", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": json.dumps(found)}]
    reply = await DemoModel().complete(messages, TOOLS)
    assert reply.text.startswith("I couldn't find that customer. I know Acme") and "{" not in reply.text
