"""The outbox's three kinds of consumer, told apart by what they offer (bot.ports).

A consumer with ``deliver_batch`` gets a pass's events in one call; one with ``start_delivery`` may let an
event land while the next begins; any other gets ``deliver`` per event. A method set to None does not
count (as with ``isinstance`` against the runtime Protocols, which the outbox no longer asks per pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.approval import always
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import Event
from bot.session import SessionRef
from tests.engine.harness import ALICE, decision, make_runtime, recording_tool, say


@dataclass
class Batches:
    batches: list[list[str]] = field(default_factory=list)

    async def deliver(self, event: Event, session: SessionRef) -> None:
        raise AssertionError("a batch consumer is handed batches")

    async def deliver_batch(self, events: list[Event], session: SessionRef) -> None:
        self.batches.append([e.type for e in events])


@dataclass
class OneByOne:
    """Has the other kinds' method names, set to None: it is neither."""

    seen: list[str] = field(default_factory=list)
    deliver_batch: Any = None
    start_delivery: Any = None

    async def deliver(self, event: Event, session: SessionRef) -> None:
        self.seen.append(event.type)


async def test_each_consumer_gets_every_event_in_the_way_it_offers(redis):
    refund, runs = recording_tool("refund", approval=always())
    runtime, frontend, _ = make_runtime(redis, ScriptedModel([call("refund", call_id="r1", charge="ch_1"),
                                                              model_say("refunded")]), [refund])
    batches, one_by_one = Batches(), OneByOne()
    runtime.add_consumer("batches", batches)
    runtime.add_consumer("one-by-one", one_by_one)

    await say(runtime, "refund ch_1")
    [card] = frontend.requests()
    await runtime.answer(decision(card.request_id, "approve", ALICE))
    await runtime.wait_idle()

    assert len(runs) == 1 and "message.completed" in frontend.types()
    assert one_by_one.seen == frontend.types()
    assert [t for batch in batches.batches for t in batch] == frontend.types()
    assert len(batches.batches) < len(frontend.types())  # (several events at a time)
