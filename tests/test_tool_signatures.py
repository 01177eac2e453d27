"""A tool may take plain typed parameters: its arguments' model is generated from the signature, and
everything that reads a tool's input (schema, validation, cards, forms, prompts, approval keys, previews,
the engine's approval path) reads it as it reads a pydantic model. The model form stays as it was."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from blocks.forms import check_form_model, form_blocks
from bot import ToolContext, always, money, tool
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from bot.session import SessionInfo
from tests.engine.harness import ALICE, make_runtime, say, shown, stored_policies, tool_results

RAN: list[dict[str, Any]] = []


class Charge(BaseModel):
    charge_id: str


def context() -> ToolContext:
    return ToolContext(
        session=SessionInfo(id="s1", team_id="T1"), principal=None, call_id="c1", idempotency_key="k1"
    )


async def amount_preview(args: Any, ctx: ToolContext) -> str:
    return f"{args.charge_id} goes down by {args.amount}"


@tool(
    approval=always(),
    editable=True,
    prompt="Refund ${amount:,.2f} on {charge_id}?",
    approval_key=lambda args: f"refund:{args.charge_id}",
    preview=amount_preview,
)
async def refund(
    charge_id: Annotated[str, Field(description="The charge to refund.", min_length=3)],
    amount: Annotated[float, money("USD", gt=0, le=100, title="Amount refunded")],
    ctx: ToolContext,
    reason: Literal["duplicate", "fraud", "requested"] = "requested",
) -> dict:
    """Refund a charge to the customer."""
    RAN.append({"charge_id": charge_id, "amount": amount, "reason": reason, "call": ctx.call_id})
    return {"refunded": charge_id, "amount": amount}


def test_the_model_is_told_the_parameters_their_descriptions_defaults_and_bounds():
    spec = refund.spec()
    assert spec.description == "Refund a charge to the customer."
    props = spec.parameters["properties"]
    assert set(props) == {"charge_id", "amount", "reason"}  # the context is not an argument
    assert props["charge_id"]["description"] == "The charge to refund."
    assert props["amount"]["exclusiveMaximum" if "exclusiveMaximum" in props["amount"] else "maximum"] == 100
    assert (
        props["reason"]["enum"] == ["duplicate", "fraud", "requested"]
        and props["reason"]["default"] == "requested"
    )
    assert sorted(spec.parameters["required"]) == ["amount", "charge_id"]


def test_arguments_are_validated_against_the_signature_and_refusals_name_the_field():
    with pytest.raises(ValueError, match="amount") as refused:
        refund.parse('{"charge_id": "ch_1", "amount": 250}')
    assert "charge_id" not in str(refused.value)
    with pytest.raises(ValueError, match="charge_id"):
        refund.parse({"amount": 5})


def test_a_plain_tool_runs_with_its_parameters_and_the_context_wherever_it_is():
    RAN.clear()
    args = refund.parse({"charge_id": "ch_1", "amount": 5})
    assert asyncio.run(refund.invoke(args, context())) == {"refunded": "ch_1", "amount": 5.0}
    assert RAN == [{"charge_id": "ch_1", "amount": 5.0, "reason": "requested", "call": "c1"}]

    @tool
    def first(ctx: ToolContext, *, n: int = 2) -> str:  # sync, the context first, a keyword-only parameter
        return f"{ctx.call_id}:{n}"

    assert asyncio.run(first.invoke(first.parse({"n": 3}), context())) == "c1:3"


def test_the_context_may_be_left_out_and_a_tool_may_take_nothing():
    @tool
    async def add(a: int, b: int = 1) -> int:
        return a + b

    @tool
    async def ping() -> str:
        return "pong"

    assert asyncio.run(add.invoke(add.parse({"a": 2}), context())) == 3
    assert ping.spec().parameters["properties"] == {}
    assert asyncio.run(ping.invoke(ping.parse(None), context())) == "pong"


def test_a_parameter_named_like_an_old_pydantic_method_is_a_plain_field(recwarn):
    @tool
    async def render(json: str, copy: int = 1) -> str:
        return json * copy

    assert set(render.spec().parameters["properties"]) == {"json", "copy"}
    assert asyncio.run(render.invoke(render.parse({"json": "ab", "copy": 2}), context())) == "abab"
    assert not [w for w in recwarn if "shadows" in str(w.message)]


def test_the_card_prompt_approval_key_and_preview_read_the_plain_arguments():
    args = refund.parse({"charge_id": "ch_1001", "amount": 40})
    assert refund.approval_prompt(args) == "Refund $40.00 on ch_1001?"
    assert refund.approval_key(args) == "refund:ch_1001"
    assert asyncio.run(refund.preview(args, context())) == "ch_1001 goes down by 40.0"
    assert refund.shown_as == {"amount": "money:USD"} and refund.labels == {"amount": "Amount refunded"}


def test_edit_before_approve_builds_its_form_from_the_plain_parameters():
    check_form_model(refund.input_model)  # the bot refuses to start on an editable tool it cannot show
    blocks = form_blocks(refund.input_model, values={"charge_id": "ch_1", "amount": 40.0, "reason": "fraud"})
    ids = [b["block_id"] for b in blocks if b["type"] == "input"]
    assert [i.split(":")[-1] for i in ids] == ["charge_id", "amount", "reason"]
    assert "ch_1" in json.dumps(blocks) and "fraud" in json.dumps(blocks)


def test_the_model_form_and_the_raw_form_work_as_before():
    async def by_model(args: Charge, ctx) -> str:  # the second parameter is the context, however annotated
        return f"{args.charge_id}:{ctx.call_id}"

    async def raw(args: dict, ctx: ToolContext) -> dict:
        return args

    made = tool(by_model)
    assert made.input_model is Charge
    assert asyncio.run(made.invoke(made.parse({"charge_id": "ch_1"}), context())) == "ch_1:c1"
    loose = tool(raw)
    assert loose.input_model is None and loose.spec().parameters == {"type": "object", "properties": {}}
    assert asyncio.run(loose.invoke(loose.parse({"x": 1}), context())) == {"x": 1}
    assert tool(lambda args: args).input_model is None  # unannotated: the raw object


def test_signatures_no_model_can_describe_are_refused_when_the_tool_is_made():
    with pytest.raises(TypeError, match=r"\*\*options"):

        @tool
        async def anything(**options: Any) -> None: ...

    with pytest.raises(TypeError, match="one ToolContext"):

        @tool
        async def twice(a: ToolContext, b: ToolContext) -> None: ...

    with pytest.raises(TypeError, match="cannot be called model_config"):

        @tool
        async def configured(model_config: str) -> None: ...

    with pytest.raises(ValueError, match="editable"):

        @tool(editable=True)
        async def loose(args: dict, ctx: ToolContext) -> None: ...


async def test_a_plain_parameter_tool_is_approved_through_the_engine_and_runs_once(redis):
    RAN.clear()
    model = ScriptedModel([call("refund", call_id="c1", charge_id="ch_1", amount=40.0), model_say("Done.")])
    runtime, channel, _ = make_runtime(redis, model, [refund], policies=stored_policies(redis))
    await say(runtime, "refund ch_1")
    [req] = channel.requests()
    assert req.prompt == "Refund $40.00 on ch_1?" and req.editable
    assert req.action.input == {
        "charge_id": "ch_1",
        "amount": 40.0,
        "reason": "requested",
    }  # the card's fields
    assert req.action.shown_as == {"amount": "money:USD"} and req.action.labels == {
        "amount": "Amount refunded"
    }
    assert RAN == []
    edited = {"charge_id": "ch_1", "amount": 30.0, "reason": "duplicate"}
    result = await runtime.answer(
        InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE, edited_input=edited)
    )
    await runtime.wait_idle()
    assert result.state == "settled"
    assert RAN == [{**edited, "call": "c1"}]
    told = json.loads(tool_results(shown(model))["c1"])
    assert told["arguments"] == edited and json.loads(told["result"]) == {"refunded": "ch_1", "amount": 30.0}
