"""Sub-agents: ``delegate`` runs a named agent in its own session; its requests show
in the parent's thread labelled with its name; the parent waits durably; cancelling the parent (or
steering past it) cancels the child. One engine, one settle path."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel

from blocks.cards import render_request
from bot.agents import SubAgent
from bot.approval import always
from bot.models.base import ModelResponse
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.principals import APP_PRINCIPAL
from bot.protocol import InputResponse
from bot.tools import ToolContext, tool
from tests.engine.harness import ALICE, BOB, approve, cancel, make_runtime, say, session, shown, tool_results

PARENT = session().session_id


class Lookup(BaseModel):
    customer: str


RAN: list[tuple[str, Any]] = []


@tool(approval=always())
async def crm_lookup(args: Lookup, ctx: ToolContext) -> dict:
    """Look a customer up in the CRM."""
    RAN.append((args.customer, ctx.principal))
    return {"customer": args.customer, "plan": "gold"}


@tool
async def notify_team(args: dict) -> str:
    """Tell the team something."""
    return "told"


RESEARCHER = SubAgent(
    name="researcher",
    description="Looks customers up in the CRM.",
    instructions="You research customers. Answer in one line.",
    tools=[crm_lookup],
)


class ByAgent:
    """One scripted model per agent, chosen by the system prompt it is shown (the sub-agent's instructions)."""

    name = "by-agent"

    def __init__(self, main: ScriptedModel, **by_instructions: ScriptedModel):
        self.main, self.by_instructions = main, by_instructions

    async def complete(self, messages: list[dict], tools: list, *, on_text: Any = None) -> ModelResponse:
        system = messages[0]["content"] if messages and messages[0].get("role") == "system" else None
        model = next(
            (m for instructions, m in self.by_instructions.items() if instructions == system), self.main
        )
        return await model.complete(messages, tools, on_text=on_text)


def models(parent_then: Any = None) -> tuple[ByAgent, ScriptedModel, ScriptedModel]:
    child = ScriptedModel(
        [
            call("crm_lookup", call_id="k1", customer="acme"),
            lambda m, t: model_say("acme is on " + json.loads(m[-1]["content"])["plan"]),
        ]
    )
    parent = ScriptedModel(
        [
            call("delegate", call_id="d1", agent="researcher", task="Which plan is acme on?"),
            parent_then or (lambda m, t: model_say("Answer: " + m[-1]["content"])),
        ]
    )
    return ByAgent(parent, **{RESEARCHER.instructions: child}), parent, child


async def delegated(redis, parent_then: Any = None):
    RAN.clear()
    model, parent, child = models(parent_then)
    runtime, channel, store = make_runtime(redis, model, [notify_team, RESEARCHER])
    await say(runtime, "what plan is acme on?")
    [delegation, ask] = channel.requests()
    return runtime, channel, store, parent, child, delegation, ask


def said(channel, session_id: str = PARENT) -> list[str]:
    return [e.text for e in channel.of("message.completed") if e.session_id == session_id]


async def test_a_delegated_approval_runs_once_and_the_parent_answers_with_the_childs_result(redis):
    runtime, channel, store, parent, child, delegation, ask = await delegated(redis)
    assert delegation.kind == "delegation" and delegation.agent == "researcher"
    assert delegation.prompt == "Delegated to *researcher*: Which plan is acme on?"
    assert [o.id for o in delegation.options] == ["cancel"] and delegation.principal == ALICE
    assert ask.kind == "tool-approval" and ask.agent == "researcher" and ask.principal == ALICE
    assert ask.session_id == delegation.child_session_id and ask.session_id.startswith(
        PARENT + ">agent:researcher:"
    )
    # the child's model got its instructions and its tools only; the main model never saw crm_lookup
    assert shown(child, 0)[0] == {"role": "system", "content": RESEARCHER.instructions}
    assert [s.name for s in child.requests[0][1]] == ["crm_lookup"]
    assert "crm_lookup" not in [s.name for s in parent.requests[0][1]]
    delegate_spec = next(s for s in parent.requests[0][1] if s.name == "delegate")
    assert "researcher: Looks customers up in the CRM." in delegate_spec.description
    # the card says who asks
    card = json.dumps(render_request(ask))
    assert "From sub-agent *researcher*" in card
    assert "researcher* is working on" in json.dumps(render_request(delegation))

    result = await approve(runtime, ask.request_id)
    assert result.state == "settled"
    assert RAN == [("acme", ALICE)]
    assert said(channel) == ["Answer: acme is on gold"]
    assert said(channel, ask.session_id) == ["acme is on gold"]
    assert tool_results(shown(parent))["d1"] == "acme is on gold"
    record = await store.get_request(delegation.request_id)
    assert (
        record.outcome == "answered"
        and record.responder == APP_PRINCIPAL
        and record.response.via == "subagent"
    )
    assert channel.types()[-2:] == ["turn.completed", "session.waiting"]
    # a late click changes nothing
    assert (await approve(runtime, ask.request_id)).state == "stale" and len(RAN) == 1


async def test_the_main_agent_cannot_call_a_sub_agents_tool_nor_the_sub_agent_the_main_agents(redis):
    RAN.clear()
    parent = ScriptedModel([call("crm_lookup", call_id="x1", customer="acme"), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, ByAgent(parent), [notify_team, RESEARCHER])
    await say(runtime, "look acme up yourself")
    refused = tool_results(shown(parent))["x1"]
    assert (
        "unknown tool 'crm_lookup'" in refused and "available: ask_question, delegate, notify_team" in refused
    )
    assert RAN == [] and channel.requests() == []

    child = ScriptedModel([call("notify_team", call_id="n1"), model_say("could not")])
    parent = ScriptedModel(
        [call("delegate", call_id="d1", agent="researcher", task="tell the team"), model_say("done")]
    )
    runtime, channel, _ = make_runtime(
        redis, ByAgent(parent, **{RESEARCHER.instructions: child}), [notify_team, RESEARCHER]
    )
    await say(runtime, "go", ref=session("s2"))
    assert "unknown tool 'notify_team'; available: crm_lookup" in tool_results(shown(child))["n1"]
    assert tool_results(shown(parent))["d1"] == "could not"


async def test_an_unknown_sub_agent_is_a_failed_call_the_model_can_correct(redis):
    parent = ScriptedModel([call("delegate", call_id="d1", agent="lawyer", task="?"), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, ByAgent(parent), [RESEARCHER])
    await say(runtime, "ask the lawyer")
    told = json.loads(tool_results(shown(parent))["d1"])
    assert told["status"] == "failed" and "unknown sub-agent 'lawyer'; available: researcher" in told["error"]


async def test_cancelling_the_parent_cancels_the_child_and_its_pending_call_never_runs(redis):
    runtime, channel, store, *_, delegation, ask = await delegated(redis)
    assert await runtime.cancel_turn(PARENT, ALICE)
    await runtime.wait_idle()
    assert (await store.get_request(delegation.request_id)).outcome == "cancelled"
    assert (await store.get_request(ask.request_id)).outcome == "cancelled"
    assert {e.session_id for e in channel.of("turn.cancelled")} == {PARENT, ask.session_id}
    # each says what ended it: alice's stop, and for the child's card, the end of its delegation
    ended = {r.request_id: (r.ended_by, r.by) for e in channel.of("input.resolved") for r in e.resolutions}
    assert ended[delegation.request_id] == ("stop", ALICE) and ended[ask.request_id] == ("delegation-ended", None)
    assert (await approve(runtime, ask.request_id)).state == "stale"
    assert RAN == []


async def test_cancel_on_the_delegation_card_stops_the_child_and_the_parent_goes_on(redis):
    runtime, channel, store, parent, _, delegation, ask = await delegated(
        redis,
        parent_then=lambda m, t: model_say("Stopped: " + json.loads(m[-1]["content"])["approval"]["status"]),
    )
    # nobody but the app sends the result, and only the requester may cancel
    forged = await runtime.answer(
        InputResponse(request_id=delegation.request_id, values={"result": "gold"}, principal=ALICE)
    )
    assert forged.state == "rejected"
    assert (await cancel(runtime, delegation.request_id, BOB)).state == "rejected"
    assert (await cancel(runtime, delegation.request_id)).state == "settled"
    assert (await store.get_request(ask.request_id)).outcome == "cancelled"
    assert said(channel) == ["Stopped: denied"]
    assert (await approve(runtime, ask.request_id)).state == "stale" and RAN == []


async def test_steering_past_the_delegation_cancels_the_child(redis):
    runtime, channel, store, parent, _, delegation, ask = await delegated(
        redis, parent_then=lambda m, t: model_say("OK, " + m[-1]["content"])
    )
    await say(runtime, "never mind, different question")
    assert (await store.get_request(delegation.request_id)).outcome == "ignored"
    assert (await store.get_request(ask.request_id)).outcome == "cancelled"
    assert said(channel) == ["OK, never mind, different question"]
    assert RAN == []


async def test_a_typed_reply_in_the_thread_answers_the_sub_agents_request(redis):
    runtime, channel, store, *_, delegation, ask = await delegated(redis)
    await say(runtime, "approve")
    assert RAN == [("acme", ALICE)]
    assert said(channel) == ["Answer: acme is on gold"]


async def test_only_the_requester_approves_the_sub_agents_call(redis):
    runtime, channel, store, *_, delegation, ask = await delegated(redis)
    result = await approve(runtime, ask.request_id, BOB)
    assert result.state == "rejected" and RAN == []
    assert (await store.get_request(ask.request_id)).status == "open"


async def test_a_restarted_runtime_completes_the_child_and_the_parent(redis):
    runtime, channel, store, *_, delegation, ask = await delegated(redis)
    model, parent, child = models()  # a new process: fresh models, nothing in memory
    again, channel2, _ = make_runtime(redis, model, [notify_team, RESEARCHER])
    await approve(again, ask.request_id)
    assert RAN == [("acme", ALICE)]
    assert said(channel2) == ["Answer: acme is on gold"]
    assert said(channel) == []


class DiesOnce:
    """The relay of a process that died before it started the child."""

    def __init__(self) -> None:
        self.died = False

    async def deliver(self, event, session) -> None:
        if not self.died:
            self.died = True
            raise RuntimeError("killed")


async def test_a_child_not_started_before_a_crash_is_started_by_the_sweep(redis):
    RAN.clear()
    model, *_ = models()
    runtime, channel, _ = make_runtime(redis, model, [notify_team, RESEARCHER])
    runtime.outbox.consumers["subagents"] = DiesOnce()
    await say(runtime, "what plan is acme on?")
    assert [r.kind for r in channel.requests()] == ["delegation"]
    model, *_ = models()
    again, channel2, _ = make_runtime(redis, model, [notify_team, RESEARCHER])
    await asyncio.sleep(0.6)  # the failed delivery's backoff
    await again.recover()
    await again.wait_idle()
    [ask] = [r for r in channel2.requests() if r.kind == "tool-approval"]
    assert ask.agent == "researcher"
    await approve(again, ask.request_id)
    assert said(channel2) == ["Answer: acme is on gold"] and len(RAN) == 1


async def test_a_replica_without_the_sub_agent_leaves_its_session_to_one_that_has_it(redis):
    # a rolling deploy: replica B has the tool but not the sub-agent. It must not run the child's turn
    # with its own model, prompt and tool list; the replica that has the sub-agent finishes it.
    runtime, channel, store, parent, child, delegation, ask = await delegated(redis)
    other_model = ScriptedModel([model_say("an answer from the wrong agent")])
    replica_b, channel_b, _ = make_runtime(redis, other_model, [notify_team, crm_lookup])
    settled = await replica_b.answer(InputResponse(request_id=ask.request_id, option_id="approve", principal=ALICE),
                                     resume=False)
    assert settled.state == "settled"
    await replica_b.drive(delegation.child_session_id)
    await replica_b.wait_idle()
    assert other_model.requests == [] and RAN == []  # B touched nothing of the child's turn
    await runtime.drive(delegation.child_session_id)  # the one with the sub-agent (or its sweep) does
    await runtime.wait_idle()
    assert [c for c, _ in RAN] == ["acme"]
    assert said(channel)[-1] == "Answer: acme is on gold"


async def test_a_child_turn_that_fails_for_good_closes_its_open_cards_and_the_parent_hears_of_it(redis):
    # the sub-agent is loaded nowhere any more: the replica that keeps trying gives up after its retries.
    # Nothing may be left open: the child's approval card ends "no longer needed" (a late click does
    # nothing), and the parent's delegation gets the failure instead of waiting forever.
    from bot.engine.turns import RuntimeSettings

    runtime, channel, store, parent, child, delegation, ask = await delegated(redis)
    replica_b, channel_b, _ = make_runtime(redis, ScriptedModel([]), [notify_team],
                                           settings=RuntimeSettings(system_prompt="", max_drive_failures=3))
    for _ in range(3):
        await redis.zadd("hitl:active", {delegation.child_session_id: 0})
        await replica_b.recover()
        await replica_b.wait_idle()
    assert (await store.get_request(ask.request_id)).status != "open"
    resolved = [r for e in channel_b.of("input.resolved") for r in e.resolutions if r.request_id == ask.request_id]
    assert [r.outcome for r in resolved] == ["ignored"]
    late = await runtime.answer(InputResponse(request_id=ask.request_id, option_id="approve", principal=ALICE))
    assert late.state == "stale" and RAN == []
    await runtime.recover()  # the relay tells the parent (whichever replica delivers the child's events)
    await runtime.wait_idle()
    assert (await store.get_request(delegation.request_id)).status != "open"


# --- whatever ends a delegation ends the sub-agent's open requests -------------------


class RelayDown:
    """The relay of the replica that would stop the child died (or is slow): every delivery fails, so the
    outbox keeps the events for later. Meanwhile the child's card is still on screen and clickable."""

    async def deliver(self, event, session) -> None:
        raise RuntimeError("relay down")


async def test_approving_a_cancelled_delegations_card_runs_nothing_and_says_it_is_no_longer_needed(redis):
    from blocks.ephemeral import already_settled_text
    from blocks.outcomes import resolution_label

    runtime, channel, store, parent, _, delegation, ask = await delegated(redis, parent_then=model_say("Stopped."))
    runtime.outbox.consumers["subagents"] = RelayDown()
    assert (await cancel(runtime, delegation.request_id)).state == "settled"
    assert said(channel) == ["Stopped."]

    clicked = await approve(runtime, ask.request_id)
    assert RAN == []
    assert clicked.state == "stale"
    record = clicked.record
    assert record.status != "open" and record.responder is None
    assert already_settled_text(resolution_label(record.request, record.outcome), None) == (
        "This request is no longer needed.")
    # and the card is updated: its resolution is committed for the frontend
    resolved = [r for e in channel.of("input.resolved") for r in e.resolutions if r.request_id == ask.request_id]
    assert [r.outcome for r in resolved] == ["cancelled"]
    # the child's turn is over too (nothing of it runs later)
    assert ask.session_id in {e.session_id for e in channel.of("turn.cancelled")}
    assert RAN == []


async def test_a_call_approved_before_its_delegation_ended_does_not_run_after_it(redis):
    runtime, channel, store, parent, _, delegation, ask = await delegated(redis, parent_then=model_say("Stopped."))
    runtime.outbox.consumers["subagents"] = RelayDown()
    # approved, but the child was not driven yet (the approver's process died after the settle)
    approved = await runtime.answer(InputResponse(request_id=ask.request_id, option_id="approve", principal=ALICE),
                                    resume=False)
    assert approved.state == "settled" and approved.batch_complete
    assert (await cancel(runtime, delegation.request_id)).state == "settled"
    await runtime.drive(ask.session_id)  # the sweep (or any replica) drives the child now
    await runtime.wait_idle()
    assert RAN == []
    assert ask.session_id in {e.session_id for e in channel.of("turn.cancelled")}
    assert said(channel) == ["Stopped."]


async def test_a_delegation_whose_parent_turn_failed_leaves_no_card_that_runs(redis):
    # the parent's turn is given up on (its request ends "ignored"): the child's card runs nothing either
    runtime, channel, store, parent, _, delegation, ask = await delegated(redis)
    runtime.outbox.consumers["subagents"] = RelayDown()
    assert await runtime.settler.resolve_unanswered(await store.get_request(delegation.request_id), "ignored", ended_by="turn-failed")
    clicked = await approve(runtime, ask.request_id)
    assert clicked.state == "stale" and RAN == []


async def test_a_delegation_past_its_deadline_stops_the_sub_agent_and_the_parent_goes_on(redis):
    from tests.engine.test_timers import Clock

    RAN.clear()
    clock = Clock()
    hasty = SubAgent(**{**RESEARCHER.model_dump(exclude={"tools"}), "tools": RESEARCHER.tools, "expires_after": 600})
    model, parent, _ = models(parent_then=lambda m, t: model_say("Told: " + json.loads(m[-1]["content"])["message"]))
    runtime, channel, store = make_runtime(redis, model, [notify_team, hasty])
    runtime.settings.clock = clock
    await say(runtime, "what plan is acme on?")
    [delegation, ask] = channel.requests()
    assert delegation.expires_at is not None and (delegation.expires_at - delegation.created_at).total_seconds() == 600
    clock.now += 601
    await runtime.recover()
    await runtime.wait_idle()
    assert (await store.get_request(delegation.request_id)).outcome == "expired"
    assert (await store.get_request(ask.request_id)).outcome == "cancelled"  # its card: no longer needed
    assert said(channel) == ["Told: researcher did not finish in time and was stopped; its work is not done."]
    assert (await approve(runtime, ask.request_id)).state == "stale" and RAN == []
    from blocks.outcomes import resolution_label

    assert resolution_label(delegation, "expired") == "Stopped after 10 min — the sub-agent ran out of time"


async def test_stopping_a_sub_agent_never_holds_up_the_sweep_behind_busy_turns(redis):
    # the relay stops the child from inside an outbox pass; with every drive slot of this
    # process held by slow tools, that pass (and so the sweep, and every deadline after it) must not wait
    from bot.engine.turns import RuntimeSettings
    from bot.protocol import InputResponse as Response
    from bot.tools import Tool
    from store.session_keys import OUTBOX

    RAN.clear()
    entered, release = asyncio.Event(), asyncio.Event()

    async def sync_ledger(args: dict) -> dict:
        entered.set()
        await release.wait()
        return {"synced": True}

    model, *_ = models()
    slow_model = ScriptedModel([call("sync_ledger"), model_say("synced")])
    runtime, channel, store = make_runtime(
        redis, ByAgent(model.main, **{RESEARCHER.instructions: model.by_instructions[RESEARCHER.instructions],
                                      "slow": slow_model}),
        [notify_team, RESEARCHER, Tool(sync_ledger, name="sync_ledger")],
        settings=RuntimeSettings(system_prompt="", max_active_turns=1))
    await say(runtime, "what plan is acme on?")
    [delegation, ask] = channel.requests()
    relay = runtime.outbox.consumers["subagents"]
    runtime.outbox.consumers["subagents"] = RelayDown()  # the cancel's own delivery fails: the sweep's to do
    await runtime.answer(Response(request_id=delegation.request_id, option_id="cancel", principal=ALICE), resume=False)
    await runtime.wait_idle()
    runtime.outbox.consumers["subagents"] = relay

    runtime.settings.system_prompt = "slow"  # (picks the slow model for a new session)
    busy = asyncio.create_task(say(runtime, "sync", ref=session("busy")))  # holds the only drive slot
    try:
        await asyncio.wait_for(entered.wait(), 2)
        await redis.hdel(store.key(PARENT, "out"), "_hold:subagents")
        await redis.zadd(OUTBOX, {PARENT: 0})
        await asyncio.wait_for(runtime.recover(), 1)  # delivers the cancel to the relay without waiting
        assert (await store.get_request(ask.request_id)).outcome == "cancelled"
    finally:
        release.set()
        await busy
    await runtime.wait_idle()
    assert ask.session_id in {e.session_id for e in channel.of("turn.cancelled")} and RAN == []
