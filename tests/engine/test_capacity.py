"""A process works on at most ``max_active_turns`` sessions at once; the others wait without a lease."""

from __future__ import annotations

import asyncio

from bot.engine.turns import RuntimeSettings
from bot.models.base import ModelResponse
from bot.models.scripted import ScriptedModel
from bot.models.scripted import say as model_say
from tests.engine.harness import ALICE, make_runtime, session


class GatedModel:
    """The first step of every turn waits for the gate; counts how many wait at once."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.inside = 0
        self.most_inside = 0
        self.entered = asyncio.Condition()

    async def first_step(self, messages, tools) -> ModelResponse:
        async with self.entered:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            self.entered.notify_all()
        try:
            await self.gate.wait()
        finally:
            self.inside -= 1
        return model_say("Done.")

    def model(self) -> ScriptedModel:
        return ScriptedModel([self.first_step])

    async def until_inside(self, n: int) -> None:
        async with asyncio.timeout(5), self.entered:
            await self.entered.wait_for(lambda: self.inside == n)


async def test_turns_beyond_the_limit_wait_for_a_slot_and_then_all_finish(redis):
    gated = GatedModel()
    runtime, channel, _ = make_runtime(redis, gated.model(), [],
                                       settings=RuntimeSettings(system_prompt="", max_active_turns=2))
    refs = [session(f"s{i}") for i in range(4)]
    posts = [asyncio.create_task(runtime.post_message(ref, ALICE, "hello")) for ref in refs]
    await gated.until_inside(2)
    await asyncio.sleep(0.2)  # the other two had every chance to start
    assert gated.inside == 2
    gated.gate.set()
    await asyncio.gather(*posts)
    await runtime.wait_idle()
    assert gated.most_inside == 2
    completed = {e.session_id for e in channel.of("turn.completed")}
    assert completed == {ref.session_id for ref in refs}


async def test_a_session_waiting_for_a_slot_holds_no_lease_so_another_replica_takes_it(redis):
    gated = GatedModel()
    busy, _, _ = make_runtime(redis, gated.model(), [], settings=RuntimeSettings(system_prompt="", max_active_turns=1))
    first, second = session("busy"), session("waiting")
    running = asyncio.create_task(busy.post_message(first, ALICE, "hello"))
    await gated.until_inside(1)
    waiting = asyncio.create_task(busy.post_message(second, ALICE, "hello"))
    await asyncio.sleep(0.1)

    other, other_channel, _ = make_runtime(redis, ScriptedModel([model_say("Taken over.")]), [])
    await other.drive(second.session_id)  # a replica's sweep, say
    await other.wait_idle()
    assert [e.session_id for e in other_channel.of("turn.completed")] == [second.session_id]

    gated.gate.set()
    await asyncio.gather(running, waiting)
    await busy.wait_idle()
    assert gated.most_inside == 1
