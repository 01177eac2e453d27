"""Richer decisions in the engine: a cancel's reason, approving with edited arguments,
templates and question styles — all through the one settle path, all fail closed."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pydantic import BaseModel

from bot.approval import Approval, always
from bot.governance import n_of_m
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from bot.tools import Tool, ToolContext, tool
from tests.engine.harness import ALICE, BOB, CAROL, make_runtime, say, shown, stored_policies, tool_results


class Refund(BaseModel):
    charge_id: str
    amount: float


RAN: list[dict] = []


@tool(approval=always(), editable=True, prompt="Refund ${amount:,.2f} on {charge_id}?",
      denied_message="Not approved: tell the customer it is under review.")
async def refund_charge(args: Refund, ctx: ToolContext) -> dict:
    """Refund a charge."""
    RAN.append(args.model_dump())
    return {"refunded": args.charge_id, "amount": args.amount}


@tool(approval=always())
async def fixed_refund(args: Refund, ctx: ToolContext) -> dict:
    """Refund a charge, exactly as proposed."""
    RAN.append(args.model_dump())
    return {"refunded": args.charge_id}


def script(name: str = "refund_charge") -> ScriptedModel:
    return ScriptedModel([call(name, call_id="c1", charge_id="ch_1", amount=40.0), model_say("Done.")])


async def parked(redis, tool_obj: Tool, name: str | None = None):
    RAN.clear()
    model = script(name or tool_obj.name)
    runtime, channel, store = make_runtime(redis, model, [tool_obj], policies=stored_policies(redis))
    await say(runtime, "refund ch_1")
    [req] = channel.requests()
    return runtime, channel, model, req


async def test_the_card_question_comes_from_the_tools_prompt_template(redis):
    _, _, _, req = await parked(redis, refund_charge)
    assert req.prompt == "Refund $40.00 on ch_1?" and req.editable


async def test_a_prompt_that_does_not_fit_the_arguments_falls_back_to_the_description(redis):
    @tool(approval=always(), prompt="Refund {amount} to {customer_email}?")  # no such field
    async def odd_refund(args: Refund, ctx: ToolContext) -> dict:
        """Refund a charge, oddly."""
        return {}

    _, _, _, req = await parked(redis, odd_refund)
    assert req.prompt == "Refund a charge, oddly."


async def test_a_typed_cancel_with_a_reason_reaches_the_model_as_the_cancellers_words(redis):
    runtime, channel, model, req = await parked(redis, refund_charge)
    await say(runtime, "Cancel: the customer already got store credit")
    assert RAN == []
    [settled] = channel.of("approval.settled")
    assert settled.outcome == "cancelled" and settled.note == "the customer already got store credit"
    told = json.loads(tool_results(shown(model))["c1"])
    assert told["message"] == "Not approved: tell the customer it is under review."
    assert told["note"] == f'{ALICE.principal_id} wrote: "the customer already got store credit"'


async def test_cancel_colon_with_nothing_after_it_is_not_a_cancel(redis):
    runtime, channel, _, req = await parked(redis, refund_charge)
    await say(runtime, "cancel:   ")  # no reason: it answers nothing, so it steers the turn
    assert channel.of("approval.settled") == []


async def test_approving_with_an_edit_runs_the_call_once_with_the_edit_and_tells_the_model(redis):
    runtime, channel, model, req = await parked(redis, refund_charge)
    edited = {"charge_id": "ch_1", "amount": 30.0}
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE,
                                                edited_input=edited))
    await runtime.wait_idle()
    assert result.state == "settled"
    assert RAN == [edited]
    told = json.loads(tool_results(shown(model))["c1"])
    assert told["arguments"] == edited and ALICE.principal_id in told["note"]
    assert json.loads(told["result"]) == {"refunded": "ch_1", "amount": 30.0}
    [resolved] = [e for e in channel.of("input.resolved") if e.resolutions[0].request_id == req.request_id]
    assert resolved.resolutions[0].response.edited_input == edited
    again = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE,
                                               edited_input={"charge_id": "ch_1", "amount": 1.0}))
    await runtime.wait_idle()
    assert again.state == "stale" and RAN == [edited]


async def test_an_edit_of_a_tool_that_is_not_editable_is_refused_and_settles_nothing(redis):
    runtime, channel, _, req = await parked(redis, fixed_refund)
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE,
                                                edited_input={"charge_id": "ch_9", "amount": 99.0}))
    await runtime.wait_idle()  # the outbox delivers in the background
    assert result.state == "invalid" and "as proposed" in result.reason
    assert channel.of("approval.settled") == [] and RAN == []


async def test_an_edit_attached_to_a_cancel_is_refused(redis):
    runtime, channel, _, req = await parked(redis, refund_charge)
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="cancel", principal=ALICE,
                                                edited_input={"charge_id": "ch_1", "amount": 1.0}))
    await runtime.wait_idle()  # the outbox delivers in the background
    assert result.state == "invalid" and channel.of("approval.settled") == []


async def test_an_edit_is_refused_when_several_people_must_approve(redis):
    @tool(approval=Approval(request=always(), response=n_of_m(2)), editable=True)
    async def two_person_refund(args: Refund, ctx: ToolContext) -> dict:
        """Refund with two approvers."""
        RAN.append(args.model_dump())
        return {}

    runtime, channel, _, req = await parked(redis, two_person_refund)
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=BOB,
                                                edited_input={"charge_id": "ch_1", "amount": 5.0}))
    assert result.state == "invalid" and "several approvals" in result.reason
    first = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=BOB))
    assert first.state == "partial"
    second = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=CAROL,
                                                edited_input={"charge_id": "ch_1", "amount": 5.0}))
    assert second.state == "invalid"
    assert RAN == []


async def test_ctx_ask_style_reaches_the_request(redis):
    @tool
    async def pick_plan(args: dict, ctx: ToolContext) -> dict:
        """Pick a plan."""
        answer = await ctx.ask("Which plan?", options=["Basic", "Pro"], style="buttons")
        return {"plan": answer.value}

    runtime, channel, _ = make_runtime(redis, ScriptedModel([call("pick_plan"), model_say("ok")]), [pick_plan])
    await say(runtime, "plan")
    [req] = channel.requests()
    assert req.style == "buttons" and [o.id for o in req.options] == ["Basic", "Pro"]


async def test_an_edit_never_gets_past_the_tools_own_request_policy_nor_its_argument_model(redis):
    from bot.approval import Denied

    def up_to_100(ctx):  # the rule the proposal met: small refunds ask a person, big ones are denied
        return Denied("Refunds over $100 are not allowed.") if ctx.tool_input["amount"] > 100 else "user-approval"

    @tool(approval=up_to_100, editable=True)
    async def capped_refund(args: Refund, ctx: ToolContext) -> dict:
        """Refund up to $100."""
        RAN.append(args.model_dump())
        return {}

    runtime, channel, _, req = await parked(redis, capped_refund)
    too_big = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE,
                                                 edited_input={"charge_id": "ch_1", "amount": 500.0}))
    assert too_big.state == "invalid" and "Refunds over $100 are not allowed." in too_big.reason
    nonsense = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE,
                                                  edited_input={"charge_id": "ch_1", "amount": "lots"}))
    await runtime.wait_idle()  # the outbox delivers in the background
    assert nonsense.state == "invalid" and "not valid" in nonsense.reason
    assert channel.of("approval.settled") == [] and RAN == []
    fine = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE,
                                              edited_input={"charge_id": "ch_1", "amount": "60"}))
    await runtime.wait_idle()
    assert fine.state == "settled" and RAN == [{"charge_id": "ch_1", "amount": 60.0}]  # as the tool parses it


# --- "approve and don't ask again" ----------------------------------------------------------------


@tool(approval=always(grantable=["requester"], grant_days=2))
async def restart(args: dict, ctx: ToolContext) -> dict:
    """Restart."""
    RAN.append({"restart": True})
    return {"ok": True}


async def test_a_requester_grant_expires_after_its_days_and_then_asks_again(redis):
    from bot.engine.parts import RuntimeSettings
    from tests.engine.harness import session

    RAN.clear()
    now = [1_800_000_000.0]
    model = ScriptedModel([call("restart", call_id=f"r{i}") if i % 2 == 0 else model_say("ok") for i in range(6)])
    runtime, channel, store = make_runtime(redis, model, [restart],
                                           settings=RuntimeSettings(system_prompt="", clock=lambda: now[0]))
    await say(runtime, "restart", ref=session("a"))
    [req] = channel.requests()
    assert [o.scope for o in req.grants] == ["requester"] and req.grants[0].days == 2
    plain = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", grant="conversation",
                                               principal=ALICE))
    assert plain.state == "invalid"  # a scope the tool does not offer
    done = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", grant="requester",
                                              principal=ALICE))
    assert done.state == "settled"
    await runtime.wait_idle()

    now[0] += 47 * 3600
    await say(runtime, "restart", ref=session("b"))  # another conversation, within two days: runs
    assert len(RAN) == 2 and len(channel.requests()) == 1
    now[0] += 2 * 3600
    await say(runtime, "restart", ref=session("c"))  # expired: asked again
    assert len(RAN) == 2 and len(channel.requests()) == 2
    assert await store.grants.list("T1", datetime.fromtimestamp(now[0], UTC)) == []


async def test_dont_ask_again_is_refused_where_several_must_approve(redis):
    @tool(name="restart", approval=Approval(request=always(grantable=True), response=n_of_m(2)))
    async def two_person_restart(args: dict, ctx: ToolContext) -> dict:
        """Restart with two approvers."""
        RAN.append({"restart": True})
        return {}

    RAN.clear()
    model = ScriptedModel([call("restart", call_id="r1"), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, [two_person_restart], policies=stored_policies(redis))
    await say(runtime, "restart")
    [req] = channel.requests()
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", grant="requester",
                                                principal=BOB))
    assert result.state == "invalid" and "several approvals" in result.reason
    assert RAN == []
