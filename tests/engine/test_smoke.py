from pydantic import BaseModel

from bot.approval import always
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from bot.tools import ToolContext, tool
from tests.engine.harness import ALICE, make_runtime, say

RAN: list[str] = []


class Refund(BaseModel):
    charge_id: str
    amount: float


@tool(approval=always())
async def refund_charge(args: Refund, ctx: ToolContext) -> dict:
    """Refund a charge."""
    RAN.append(args.charge_id)
    return {"refunded": args.charge_id}


async def test_approve_runs_once(redis):
    RAN.clear()
    model = ScriptedModel([call("refund_charge", charge_id="ch_1", amount=5), model_say("Done, refunded.")])
    runtime, channel, _ = make_runtime(redis, model, [refund_charge])
    await say(runtime, "refund ch_1")
    assert channel.types()[-2:] == ["input.requested", "turn.waiting"]
    [req] = channel.requests()
    result = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE))
    await runtime.wait_idle()
    assert result.state == "settled"
    assert RAN == ["ch_1"]
    assert channel.types()[-3:] == ["message.completed", "turn.completed", "session.waiting"]
    again = await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE))
    assert again.state == "stale"
    assert RAN == ["ch_1"]
