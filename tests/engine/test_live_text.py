"""The turn loop hands the model's text so far to the frontend as it streams (bot.ports.LiveText):
per model step, numbered like the step's message.completed, with the person the turn serves. Not durable:
nothing of it is in the session's events."""

from __future__ import annotations

from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.principals import Principal
from bot.session import SessionRef
from tests.engine.harness import ALICE, approve, make_runtime, say
from tests.engine.test_smoke import refund_charge


class RecordingLive:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str, str | None]] = []

    def text_so_far(
        self, session: SessionRef, turn_id: str, step: int, text: str, owner: Principal | None
    ) -> None:
        self.calls.append((turn_id, step, text, owner.principal_id if owner else None))


async def test_each_steps_text_is_handed_over_as_it_grows_with_the_steps_number(redis):
    model = ScriptedModel([model_say("Let me look at that charge: it was refunded once already.")])
    live = RecordingLive()
    runtime, channel, _ = make_runtime(redis, model, [refund_charge], live=live)
    await say(runtime, "is ch_1 fine?")
    await runtime.wait_idle()
    [completed] = channel.of("message.completed")
    texts = [text for _, step, text, _ in live.calls if step == completed.step]
    assert completed.step == 1 and texts and texts[-1] == completed.text
    assert all(completed.text.startswith(t) for t in texts), "each call carries the whole text so far"
    assert {owner for *_, owner in live.calls} == {ALICE.principal_id}
    assert "live" not in str(channel.types())


async def test_a_later_step_has_its_own_number(redis):
    model = ScriptedModel([call("refund_charge", charge_id="ch_1", amount=5), model_say("Refunded.")])
    live = RecordingLive()
    runtime, channel, _ = make_runtime(redis, model, [refund_charge], live=live)
    await say(runtime, "refund ch_1")
    [req] = channel.requests()
    await approve(runtime, req.request_id)
    await runtime.wait_idle()
    [completed] = channel.of("message.completed")
    assert completed.step == 2 and {step for _, step, *_ in live.calls} == {2}
