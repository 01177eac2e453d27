"""'Approve and don't ask again' as Slack drives it: a scope named on the card,
recorded through the one settle path, shown and revocable in App Home, never approving what is
already pending, never offered where the tool's policy does not allow it."""

from __future__ import annotations

import json
from urllib.parse import quote

from pydantic import BaseModel

from bot.approval import always, once
from bot.models.scripted import ScriptedModel, call, calls, say
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOB, GENERAL, TEAM_ID
from store.audit import AuditLog
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_governance import find, open_home

RUNS: list[str] = []


class Restart(BaseModel):
    service: str


@tool(approval=always(grantable=True, grant_days=7))
async def restart_service(args: Restart, ctx: ToolContext) -> dict:
    """Restart a service."""
    RUNS.append(args.service)
    return {"restarted": args.service}


@tool(approval=always(grantable=["conversation"]))
async def clear_cache(args: dict, ctx: ToolContext) -> dict:
    """Clear the cache."""
    RUNS.append("cache")
    return {"cleared": True}


def replying(messages, tools):
    return say("Result: " + str(messages[-1]["content"]))


def turns(tool_name: str, n: int, **args) -> ScriptedModel:
    """``n`` turns, each calling ``tool_name`` once and replying with its result."""
    steps = []
    for _ in range(n):
        steps += [call(tool_name, **args), replying]
    return ScriptedModel(steps)


def grant_select(card) -> dict:
    return next(e for b in card.blocks if b["type"] == "actions" for e in b["elements"]
                if e["action_id"].endswith(":grant"))


async def replied(slack, ts):
    return await slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)


async def ran_without_asking(slack, user, text):
    ts, deliveries = await slack.post_message(user, GENERAL, f"<@U0BOT> {text}")
    reply = await replied(slack, ts)
    assert not any(m.blocks and "Approval needed" in json.dumps(m.blocks) for m in slack.messages(GENERAL, thread_ts=ts))
    return reply


async def test_dont_ask_the_requester_again_covers_their_next_conversations_until_revoked(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(turns("restart_service", 4, service="api"), [restart_service])
    ts, card = await mention_and_wait_for_card(local_slack, "restart api")
    menu = grant_select(card)
    assert menu["type"] == "static_select" and menu["confirm"]
    assert [o["value"] for o in menu["options"]] == ["conversation", "requester"]
    assert [o["text"]["text"] for o in menu["options"]] == ["Approve, don’t ask again here",
                                                            "Approve, don’t ask again for 7 days"]

    await local_slack.select(ALICE, GENERAL, card.ts, menu["action_id"], "requester")
    await replied(local_slack, ts)
    assert RUNS == ["api"]
    settled = json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert f"Won\\u2019t ask <@{ALICE}> again for 7 days" in settled
    await bot.wait_idle()  # the audit log is written by the delivery, not before the reply
    entries = await AuditLog(bot.redis.client).entries(TEAM_ID, kind="grant", limit=None)
    [grant] = entries
    assert grant.data["scope"] == "requester" and grant.data["approval_key"] == "restart_service"

    await ran_without_asking(local_slack, ALICE, "restart api again")  # another conversation: no card
    assert RUNS == ["api", "api"]

    home = await open_home(local_slack, ALICE)
    assert "Standing approvals" in json.dumps(home.blocks) and "in any conversation" in json.dumps(home.blocks)
    revoke = find(home.blocks, "grants:revoke")
    await local_slack.click_in_view(ALICE, home.id, "grants:revoke")
    await local_slack.wait_for(lambda: find(local_slack.home_view(ALICE).blocks, "grants:revoke") is None)
    [revoked] = await AuditLog(bot.redis.client).entries(TEAM_ID, kind="grant.revoked", limit=None)
    assert revoked.actor.endswith(ALICE) and revoke["value"].startswith("requester|")

    ts3, card3 = await mention_and_wait_for_card(local_slack, "restart api once more")  # asked again
    assert "Approval needed" in json.dumps(card3.blocks) and RUNS == ["api", "api"]


async def test_a_requester_grant_is_theirs_alone(local_slack, start_app):
    RUNS.clear()
    await start_app(turns("restart_service", 2, service="api"), [restart_service])
    ts, card = await mention_and_wait_for_card(local_slack, "restart api")
    await local_slack.select(ALICE, GENERAL, card.ts, grant_select(card)["action_id"], "requester")
    await replied(local_slack, ts)
    _, bobs = await mention_and_wait_for_card(local_slack, "restart api", user=BOB)
    assert "Approval needed" in json.dumps(bobs.blocks) and RUNS == ["api"]


async def test_dont_ask_again_here_covers_this_conversation_only(local_slack, start_app):
    RUNS.clear()
    steps = [call("clear_cache"), replying, call("clear_cache"), replying, call("clear_cache"), replying]
    await start_app(ScriptedModel(steps), [clear_cache])
    ts, card = await mention_and_wait_for_card(local_slack, "clear the cache")
    assert button(card, "Approve, don’t ask again here")  # one scope: a button naming it
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve, don’t ask again here"))
    await replied(local_slack, ts)
    await local_slack.post_message(ALICE, GENERAL, "<@U0BOT> once more", thread_ts=ts)
    await local_slack.wait_for(lambda: RUNS == ["cache", "cache"])  # same thread: no card
    assert "Won\\u2019t ask again in this conversation" in json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    _, other = await mention_and_wait_for_card(local_slack, "clear the cache")  # a new thread asks
    assert "Approval needed" in json.dumps(other.blocks)


async def test_a_grant_never_approves_a_request_already_pending(local_slack, start_app):
    RUNS.clear()
    both = calls(("restart_service", {"service": "api"}, "c1"), ("restart_service", {"service": "web"}, "c2"))
    await start_app(ScriptedModel([both, replying]), [restart_service])
    ts, _ = await local_slack.post_message(ALICE, GENERAL, "<@U0BOT> restart api and web")

    def grant_menus():
        return [(m.ts, e) for m in local_slack.messages(GENERAL, thread_ts=ts) for b in m.blocks or []
                if b["type"] == "actions" for e in b["elements"] if e["action_id"].endswith(":grant")]

    menus = await local_slack.wait_for(lambda: len(grant_menus()) == 2 and grant_menus())
    first_ts, first = menus[0]
    await local_slack.select(ALICE, GENERAL, first_ts, first["action_id"], "requester")
    await local_slack.wait_for(lambda: len(grant_menus()) == 1)
    assert RUNS == []  # the step waits on the other card, which the grant did not approve
    other_ts, other = grant_menus()[0]
    other_request = other["action_id"].removesuffix(":grant")
    await local_slack.click(ALICE, GENERAL, other_ts, f"{other_request}:btn:0")  # its plain Approve
    await replied(local_slack, ts)
    assert sorted(RUNS) == ["api", "web"]


async def test_a_forged_grant_on_a_tool_that_offers_none_settles_nothing(local_slack, start_app):
    from tests.e2e.test_approval_flow import RUNS as PLAIN_RUNS
    from tests.e2e.test_approval_flow import refund_charge, refund_script

    PLAIN_RUNS.clear()
    await start_app(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    assert ":grant" not in json.dumps(card.blocks)
    request_id = card.blocks[0]["block_id"].split(":title:")[0]
    forged = {"type": "block_actions", "team": {"id": TEAM_ID}, "user": {"id": ALICE, "team_id": TEAM_ID},
              "api_app_id": "A0LOCAL", "trigger_id": "1.2.3", "channel": {"id": GENERAL},
              "container": {"type": "message", "channel_id": GENERAL, "message_ts": card.ts},
              "message": {"ts": card.ts, "thread_ts": ts},
              "actions": [{"type": "button", "action_id": f"hitl:{request_id}:grant", "value": "requester",
                           "block_id": "x", "action_ts": "1.0"}]}
    body = ("payload=" + quote(json.dumps(forged))).encode()
    result = await local_slack.deliver_raw(body, {**local_slack.sign(body),
                                                  "Content-Type": "application/x-www-form-urlencoded"})
    assert result.status == 200
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "only be approved this once" in note[-1].text
    assert any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks) and PLAIN_RUNS == []


@tool(approval=once(grant_days=7))
async def rotate_key(args: dict, ctx: ToolContext) -> dict:
    """Rotate the API key."""
    RUNS.append("rotate")
    return {"rotated": True}


def standing_notes(slack, ts) -> list[str]:
    return [m.text for m in slack.messages(GENERAL, thread_ts=ts) if "standing approval" in (m.text or "")]


async def test_one_dont_ask_again_click_grants_only_the_scope_it_named(local_slack, start_app):
    """once(grant_days=…): "don't ask again for 7 days" is one standing approval (the requester's), not
    that and a second one for the conversation."""
    RUNS.clear()
    await start_app(turns("rotate_key", 1), [rotate_key])
    ts, card = await mention_and_wait_for_card(local_slack, "rotate the key")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve, don’t ask again for 7 days"))
    await replied(local_slack, ts)
    home = json.dumps((await open_home(local_slack, ALICE)).blocks)
    assert home.count('"grants:revoke"') == 1, home
    assert "in any conversation" in home and "in one conversation" not in home


async def test_conversation_grants_link_their_thread_and_calls_under_grants_say_so(local_slack, start_app):
    """A conversation grant in App Home links its thread; each call that runs under a standing approval
    says in its thread whose approval it was and where to revoke it."""
    RUNS.clear()
    steps = [call("clear_cache"), replying, call("clear_cache"), replying]
    await start_app(ScriptedModel(steps), [clear_cache])
    ts, card = await mention_and_wait_for_card(local_slack, "clear the cache")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve, don’t ask again here"))
    await replied(local_slack, ts)
    assert standing_notes(local_slack, ts) == []  # approved on its card: no note
    home = json.dumps((await open_home(local_slack, ALICE)).blocks)
    assert f"https://slack.com/archives/{GENERAL}/p{ts.replace('.', '')}" in home, home

    await local_slack.post_message(ALICE, GENERAL, "<@U0BOT> once more", thread_ts=ts)
    [note] = await local_slack.wait_for(lambda: standing_notes(local_slack, ts))
    assert RUNS == ["cache", "cache"]
    assert f"<@{ALICE}>" in note and "`clear_cache`" in note and "in this conversation" in note
    assert "App Home" in note


async def test_a_call_under_a_requester_grant_says_so_in_its_thread(local_slack, start_app):
    RUNS.clear()
    await start_app(turns("restart_service", 2, service="api"), [restart_service])
    ts, card = await mention_and_wait_for_card(local_slack, "restart api")
    await local_slack.select(ALICE, GENERAL, card.ts, grant_select(card)["action_id"], "requester")
    await replied(local_slack, ts)
    reply = await ran_without_asking(local_slack, ALICE, "restart api again")
    [note] = await local_slack.wait_for(lambda: standing_notes(local_slack, reply.thread_ts))
    assert f"<@{ALICE}>" in note and "`restart_service`" in note and "until" in note and "App Home" in note
