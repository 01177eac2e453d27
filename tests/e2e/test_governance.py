"""Governance as Slack drives it: App Home, approver lists, /approvers, four-eyes, N-of-M, tenants, audit."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from urllib.parse import quote

from pydantic import BaseModel

from bot.approval import Approval, always
from bot.governance import approvers, four_eyes, n_of_m, tenant_policy
from bot.models.scripted import ScriptedModel, call, say
from bot.principals import APP_PRINCIPAL
from bot.session import SessionRef, slack_session_id
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOB, BOT_USER_ID, CAROL, DAVE, ERIN, FINANCE, GENERAL, TEAM_ID
from store.audit import AuditLog
from store.policies import Rule
from tests.e2e.test_approval_flow import button, card_in, mention_and_wait_for_card

RUNS: list[tuple[str, str | None]] = []


class Job(BaseModel):
    target: str = "x"


class Export(BaseModel):
    team_id: str
    table: str = "customers"


def _ran(name: str, ctx: ToolContext) -> dict:
    RUNS.append((name, ctx.principal.slack_user_id if ctx.principal else None))
    return {"done": name}


@tool(approval=Approval(request=always(), response=approvers("tool:pay_vendor")))
async def pay_vendor(args: Job, ctx: ToolContext) -> dict:
    """Pay a vendor. Needs someone on the approver list."""
    return _ran("pay_vendor", ctx)


@tool(approval=Approval(request=always(), response=four_eyes()))
async def deploy(args: Job, ctx: ToolContext) -> dict:
    """Deploy. Someone other than the requester approves."""
    return _ran("deploy", ctx)


@tool(approval=Approval(request=always(), response=n_of_m(2, "tool:rotate_keys")))
async def rotate_keys(args: Job, ctx: ToolContext) -> dict:
    """Rotate keys. Two approvers from the list."""
    return _ran("rotate_keys", ctx)


@tool(approval=tenant_policy("tool:export_data"))
async def export_data(args: Export, ctx: ToolContext) -> dict:
    """Export a table of the workspace."""
    return _ran("export_data", ctx)


ALL_TOOLS = [pay_vendor, deploy, rotate_keys, export_data]


def script(tool_name: str, **args: object) -> ScriptedModel:
    def answer(messages, tools):
        return say("Result: " + str(messages[-1]["content"]))

    return ScriptedModel([call(tool_name, **args), answer])


def elements(blocks):
    for block in blocks or []:
        if block.get("accessory"):
            yield block["accessory"]
        if isinstance(block.get("element"), dict):
            yield block["element"]
        yield from block.get("elements", [])


def find(blocks, action_id):
    return next((e for e in elements(blocks) if e.get("action_id") == action_id), None)


async def open_home(slack, user):
    before = slack.home_view(user)
    version = before.hash if before else None
    result = await slack.open_home(user)
    assert result.status == 200
    return await slack.wait_for(lambda: (v := slack.home_view(user)) is not None and v.hash != version and v)


def governance(bot):
    return bot.deps.governance


async def loaded_modal(slack, user, replacing=None):
    """The modal ``/approvers`` opened for ``user`` (not the modal ``replacing``), once it shows more than
    "Loading…"."""

    def ready():
        stack = slack.open_views(user)
        if not stack or (replacing is not None and stack[-1].id == replacing.id):
            return None
        text = json.dumps(stack[-1].blocks)
        return "Loading" not in text and stack[-1]

    return await slack.wait_for(ready)


async def audit_entries(bot, kind=None):
    return await AuditLog(bot.redis.client).entries(TEAM_ID, kind=kind, limit=None)


# --- App Home and approver lists ------------------------------------------------------------


async def test_admin_sees_editor_and_member_does_not(local_slack, start_app):
    await start_app(ScriptedModel([]), ALL_TOOLS, BOT_ADMINS=DAVE)
    carol = await open_home(local_slack, CAROL)
    editor = find(carol.blocks, "approvers:edit:pay_vendor")
    assert editor is not None and editor["type"] == "multi_users_select"
    assert find(carol.blocks, "approvers:edit:rotate_keys") is not None
    assert "Only workspace admins" not in json.dumps(carol.blocks)

    bob = await open_home(local_slack, BOB)
    assert not any(str(e.get("action_id", "")).startswith("approvers:edit:") for e in elements(bob.blocks))
    assert "Only workspace admins can change who approves" in json.dumps(bob.blocks)

    dave = await open_home(local_slack, DAVE)  # listed in BOT_ADMINS
    assert find(dave.blocks, "approvers:edit:pay_vendor") is not None
    # four_eyes() and tenant rules read no list: no editor that would silently do nothing, but a line
    # saying who decides instead (members see it too)
    assert find(dave.blocks, "approvers:edit:deploy") is None and find(dave.blocks, "approvers:edit:export_data") is None
    for home in (dave, bob):
        assert "No list to edit for `deploy` (anyone but the person who asked approves)" in json.dumps(home.blocks)
        assert "`export_data` (the person who asked decides)" in json.dumps(home.blocks)


async def test_admin_saves_list_in_app_home_and_next_click_obeys_it(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(script("pay_vendor", target="acme"), ALL_TOOLS)
    ts, card = await mention_and_wait_for_card(local_slack, "pay acme")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    assert "Nobody is set up to approve `pay_vendor`" in refusal[-1].text
    assert RUNS == []

    home = await open_home(local_slack, CAROL)
    result = await local_slack.select_users(CAROL, home.id, "approvers:edit:pay_vendor", [BOB])
    assert result.status == 200
    listing = await governance(bot).policies.approvers(TEAM_ID, "tool:pay_vendor")
    assert listing is not None and listing.approvers == [BOB]
    assert listing.updated_by == f"slack:{TEAM_ID}:{CAROL}"
    refreshed = await local_slack.wait_for(
        lambda: (e := find(local_slack.home_view(CAROL).blocks, "approvers:edit:pay_vendor"))
        and e.get("initial_users") == [BOB]
    )
    assert refreshed

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert RUNS == [("pay_vendor", BOB)]
    changes = await audit_entries(bot, "policy.change")
    assert [(c.actor, c.subject) for c in changes] == [(f"slack:{TEAM_ID}:{CAROL}", "tool:pay_vendor")]


async def forged_home_edit(slack, user: str, action_id: str, chosen: list[str]):
    """An App Home select a client made up (signed: it comes through Slack, but no such select was shown)."""
    payload = {
        "type": "block_actions", "user": {"id": user, "team_id": TEAM_ID}, "team": {"id": TEAM_ID},
        "trigger_id": "1.2.3", "container": {"type": "view", "view_id": "V0HOME"},
        "view": {"id": "V0HOME", "type": "home", "app_installed_team_id": TEAM_ID},
        "actions": [{"action_id": action_id, "type": "multi_users_select",
                     "block_id": "home:tool:0", "selected_users": chosen}],
    }
    body = ("payload=" + quote(json.dumps(payload))).encode()
    return await slack.deliver_raw(body, {**slack.sign(body), "Content-Type": "application/x-www-form-urlencoded"})


async def test_non_admin_edit_is_refused_audited_and_changes_nothing(local_slack, start_app):
    bot = await start_app(ScriptedModel([]), ALL_TOOLS)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    result = await forged_home_edit(local_slack, DAVE, "approvers:edit:pay_vendor", [DAVE])
    assert result.status == 200
    listing = await governance(bot).policies.approvers(TEAM_ID, "tool:pay_vendor")
    assert listing.approvers == [BOB]
    dm = local_slack.dm_channel(DAVE)
    note = await local_slack.wait_for_message(dm, predicate=lambda m: "Only workspace admins" in m.text)
    assert "Nothing was changed" in note.text
    [refused] = await audit_entries(bot, "policy.refused")
    assert refused.actor == f"slack:{TEAM_ID}:{DAVE}" and refused.subject == "tool:pay_vendor"


async def test_deleted_approvers_are_shown_not_dropped(local_slack, start_app):
    bot = await start_app(ScriptedModel([]), ALL_TOOLS)
    local_slack.add_user("U0GONE", "gone").deleted = True
    await governance(bot).policies.set_approvers(
        TEAM_ID, "tool:pay_vendor", [BOB, "U0GONE", "U0NOSUCH"], actor="test")
    home = await open_home(local_slack, CAROL)
    text = json.dumps(home.blocks)
    assert "~deleted user~ <@U0GONE>" in text and "~deleted user~ <@U0NOSUCH>" in text
    assert find(home.blocks, "approvers:edit:pay_vendor")["initial_users"] == [BOB]
    await local_slack.slash_command(CAROL, "/approvers", "list")
    listed = await local_slack.wait_for(lambda: local_slack.ephemerals(CAROL))
    assert "~deleted user~ <@U0GONE>" in listed[-1].text


# --- /approvers -----------------------------------------------------------------------------


async def test_approvers_command_shows_members_the_lists_and_refuses_their_edits(local_slack, start_app):
    bot = await start_app(ScriptedModel([]), ALL_TOOLS)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    result = await local_slack.slash_command(DAVE, "/approvers")
    assert result.ok and result.ack_json() is None, "the answer comes in the modal, not in the ack"
    listed = await loaded_modal(local_slack, DAVE)
    text = json.dumps(listed.blocks)
    assert f"<@{BOB}>" in text and "pay_vendor" in text
    assert "_no approvers set_" in text and "ask one of them" in text
    assert listed.submit is None and not [b for b in listed.blocks if b["type"] == "input"], "read-only"
    assert local_slack.ephemerals(DAVE) == []

    await local_slack.slash_command(DAVE, "/approvers", "edit")
    refusal = await loaded_modal(local_slack, DAVE, replacing=listed)
    assert "Only workspace admins can change who approves" in json.dumps(refusal.blocks)
    assert "Nothing was changed" in json.dumps(refusal.blocks) and refusal.submit is None
    assert local_slack.ephemerals(DAVE) == []
    [refused] = await audit_entries(bot, "policy.refused")
    assert refused.actor == f"slack:{TEAM_ID}:{DAVE}"
    assert (await governance(bot).policies.approvers(TEAM_ID, "tool:pay_vendor")).approvers == [BOB]


async def test_admin_edits_every_list_in_the_approvers_modal(local_slack, start_app):
    bot = await start_app(ScriptedModel([]), ALL_TOOLS)
    await local_slack.slash_command(CAROL, "/approvers")
    modal = await loaded_modal(local_slack, CAROL)
    assert modal.callback_id == "approvers_edit" and [v.id for v in local_slack.open_views(CAROL)] == [modal.id]
    result = await local_slack.submit_view(CAROL, modal.id, {
        "approvers:pay_vendor": {"users": [BOB, DAVE]},
        "approvers:rotate_keys": {"users": [BOB, CAROL, DAVE]},
    })
    assert result.status == 200 and local_slack.open_views(CAROL) == []
    store = governance(bot).policies
    assert (await store.approvers(TEAM_ID, "tool:pay_vendor")).approvers == [BOB, DAVE]
    assert (await store.approvers(TEAM_ID, "tool:rotate_keys")).approvers == [BOB, CAROL, DAVE]
    assert await store.approvers(TEAM_ID, "tool:deploy") is None
    changes = await audit_entries(bot, "policy.change")
    assert sorted(c.subject for c in changes) == ["tool:pay_vendor", "tool:rotate_keys"]


# --- response-policy helpers end to end -----------------------------------------------------


async def test_four_eyes_requester_cannot_approve_but_may_cancel(local_slack, start_app):
    RUNS.clear()
    await start_app(script("deploy", target="api"), ALL_TOOLS)
    ts, card = await mention_and_wait_for_card(local_slack, "deploy api")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "Four-eyes" in refusal[-1].text
    assert RUNS == []
    await local_slack.click(DAVE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert RUNS == [("deploy", DAVE)]

    RUNS.clear()
    ts2, card2 = await mention_and_wait_for_card(local_slack, "deploy api again")
    await local_slack.click(ALICE, GENERAL, card2.ts, button(card2, "Cancel"))
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts2, predicate=lambda m: "Result:" in m.text)
    assert "TOOL_EXECUTION_DENIED" in reply.text
    assert RUNS == []


async def test_two_of_three_waits_for_two_distinct_approvers(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(script("rotate_keys", target="prod"), ALL_TOOLS)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:rotate_keys", [BOB, CAROL, DAVE], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "rotate prod keys")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    waiting = await local_slack.wait_for(
        lambda: "1 of 2" in json.dumps((m := local_slack.message(GENERAL, card.ts)).blocks) and m)
    assert any(b["type"] == "actions" for b in waiting.blocks), "buttons stay until the second approval"
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))  # the same person again
    await bot.wait_idle()
    assert RUNS == []
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))  # the requester never counts
    await local_slack.wait_for(lambda: [e for e in local_slack.ephemerals(ALICE) if "can't approve your own" in e.text])
    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.wait_idle()
    assert len(RUNS) == 1
    settled = local_slack.message(GENERAL, card.ts)
    assert all(b["type"] != "actions" for b in settled.blocks)


async def test_cards_and_app_home_say_who_may_answer_before_anyone_clicks(local_slack, start_app):
    bot = await start_app(script("pay_vendor", target="initech"), ALL_TOOLS)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB, CAROL], actor="test")
    _, card = await mention_and_wait_for_card(local_slack, "pay initech")
    assert f"Waiting on <@{BOB}> or <@{CAROL}>" in json.dumps(card.blocks)
    bob = await open_home(local_slack, BOB)
    assert f"Waiting on <@{BOB}> or <@{CAROL}>" in json.dumps(bob.blocks)


async def test_a_four_eyes_card_names_who_cannot_approve(local_slack, start_app):
    await start_app(script("deploy", target="web"), ALL_TOOLS)
    _, card = await mention_and_wait_for_card(local_slack, "deploy web")
    assert f"Anyone but <@{ALICE}> can approve" in json.dumps(card.blocks)


async def test_slack_connect_clicker_refused_unless_workspace_allows_external(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(script("deploy", target="web"), ALL_TOOLS)
    ts, card = await mention_and_wait_for_card(local_slack, "deploy web")
    await local_slack.click(ERIN, GENERAL, card.ts, button(card, "Approve"))
    refusal = await local_slack.wait_for(lambda: local_slack.ephemerals(ERIN))
    assert "other workspaces" in refusal[-1].text
    await bot.wait_idle()
    assert RUNS == []
    await governance(bot).policies.set_allow_external(TEAM_ID, True, actor="test")
    await local_slack.click(ERIN, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert RUNS == [("deploy", ERIN)]


# --- the tenant adapter ---------------------------------------------------------------------


def export_script() -> ScriptedModel:
    def export(messages, tools):
        team = re.search(r"T0[A-Z]+", messages[-1]["content"]).group(0)
        return call("export_data", team_id=team)

    def answer(messages, tools):
        return say("Result: " + str(messages[-1]["content"]))

    return ScriptedModel([export, answer])


async def test_tenant_policy_denies_input_naming_another_workspace(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(export_script(), ALL_TOOLS)
    await governance(bot).policies.add_rule(TEAM_ID, Rule(resource="tool:export_data", effect="allow"), actor="test")
    ts, _ = await local_slack.post_message(ALICE, GENERAL, "<@U0BOT> export T0OTHER")
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert "names another workspace" in reply.text
    assert card_in(local_slack, ts) is None and RUNS == []

    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@U0BOT> export {TEAM_ID}")
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert RUNS == [("export_data", ALICE)], "the same call for the own workspace runs (the rule allows it)"


async def test_tenant_policy_denies_a_session_not_pinned_to_one_user_of_the_workspace(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(export_script(), ALL_TOOLS)
    await governance(bot).policies.add_rule(TEAM_ID, Rule(resource="tool:export_data", effect="allow"), actor="test")
    root, _ = await local_slack.post_message(ALICE, GENERAL, "nightly export goes here")
    ref = SessionRef(session_id=slack_session_id(TEAM_ID, GENERAL, root), team_id=TEAM_ID,
                     channel={"channel_id": GENERAL, "thread_ts": root})
    # a turn the app starts by itself (a schedule): its principal is the app, not a person of the workspace
    await bot.runtime.post_message(ref, APP_PRINCIPAL, f"export {TEAM_ID}")
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=root, predicate=lambda m: "Result:" in m.text)
    assert "not tied to a single workspace" in reply.text
    assert RUNS == []


# --- App Home inbox -------------------------------------------------------------------------


async def test_app_home_lists_what_waits_on_each_person_with_working_buttons(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(script("pay_vendor", target="initech"), ALL_TOOLS)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "pay initech")

    bob = await open_home(local_slack, BOB)
    approve = next(e for e in elements(bob.blocks) if e.get("type") == "button" and e["text"]["text"] == "Approve")
    dave = await open_home(local_slack, DAVE)
    assert not [e for e in elements(dave.blocks) if e.get("type") == "button"]
    assert "Nothing is waiting on you" in json.dumps(dave.blocks)
    alice = await open_home(local_slack, ALICE)
    alice_text = json.dumps(alice.blocks)
    assert "Requested by you" in alice_text and "waiting for approval" in alice_text and f"<@{BOB}>" in alice_text
    assert not [e for e in elements(alice.blocks) if e.get("type") == "button"], "the approver list decides, not alice"

    await local_slack.click_in_view(BOB, bob.id, approve["action_id"])
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert RUNS == [("pay_vendor", BOB)]
    assert all(b["type"] != "actions" for b in local_slack.message(GENERAL, card.ts).blocks)
    again = await open_home(local_slack, BOB)
    assert "Nothing is waiting on you" in json.dumps(again.blocks)


# --- audit ----------------------------------------------------------------------------------


async def run_cli(bot, *args: str) -> tuple[int, str]:
    env = {"REDIS_URL": bot.settings.redis_url, "PATH": "/usr/bin:/bin", "BOT_TOOLS": ""}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "audit", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, out.decode()


async def test_audit_records_the_flow_and_exports_and_verifies(local_slack, start_app, tmp_path):
    RUNS.clear()
    bot = await start_app(script("pay_vendor", target="globex"), ALL_TOOLS)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    ts, card = await mention_and_wait_for_card(local_slack, "pay globex")
    await local_slack.click(DAVE, GENERAL, card.ts, button(card, "Approve"))  # refused: not on the list
    await local_slack.wait_for(lambda: local_slack.ephemerals(DAVE))
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await bot.wait_idle()

    entries = await audit_entries(bot)
    kinds = [e.kind for e in entries]
    for kind in ("policy.change", "request", "candidate", "settlement", "resolution", "execution"):
        assert kind in kinds, kind
    assert "grant" not in kinds  # always() asks every time: approving it grants nothing
    request = next(e for e in entries if e.kind == "request")
    assert request.actor == f"slack:{TEAM_ID}:{ALICE}" and request.data["tool"] == "pay_vendor"
    refused = next(e for e in entries if e.kind == "candidate" and e.data["outcome"] == "rejected")
    assert refused.actor == f"slack:{TEAM_ID}:{DAVE}"
    settled = next(e for e in entries if e.kind == "settlement")
    assert settled.actor == f"slack:{TEAM_ID}:{BOB}" and settled.data["outcome"] == "approved"
    assert next(e for e in entries if e.kind == "execution").data["status"] == "completed"

    export = tmp_path / "audit.jsonl"
    code, out = await run_cli(bot, "export", "--team", TEAM_ID, "--out", str(export))
    assert code == 0, out
    assert len(export.read_text().splitlines()) == len(entries) + 1  # and the head record that ends it
    code, out = await run_cli(bot, "verify", "--file", str(export))
    assert code == 0 and f"ok: {len(entries)} entries" in out, out
    code, out = await run_cli(bot, "verify", "--team", TEAM_ID)
    assert code == 0, out


async def test_open_app_homes_follow_requests_as_they_appear_and_settle(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(script("pay_vendor", target="umbrella"), ALL_TOOLS)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    home = await open_home(local_slack, BOB)
    assert "Nothing is waiting on you" in json.dumps(home.blocks)

    ts, card = await mention_and_wait_for_card(local_slack, "pay umbrella")
    await local_slack.wait_for(lambda: "umbrella" in json.dumps(local_slack.home_view(BOB).blocks))
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    await local_slack.wait_for(lambda: "Nothing is waiting on you" in json.dumps(local_slack.home_view(BOB).blocks))
    assert local_slack.home_view(DAVE) is None, "homes nobody opened are left alone"


async def test_offline_demo_starts_with_bob_approving_refunds_once(redis, redis_url, tmp_path):
    from bot.app import start_bot
    from bot.config import Settings

    def offline() -> Settings:
        return Settings(_env_file=None, REDIS_URL=redis_url, LOCALSLACK_PORT=0,  # type: ignore[call-arg]
                        BOT_TOOLS="bot.demo_tools", BOT_DATA_DIR=str(tmp_path / "data"))

    bot = await start_bot(offline(), host="127.0.0.1", port=0, recovery_interval=0)
    try:
        await bot.wait_idle()
        listing = await governance(bot).policies.approvers(TEAM_ID, "tool:refund_charge")
        assert listing is not None and listing.approvers == [BOB]
        await bot.localslack.open_home(CAROL)
        home = await bot.localslack.wait_for(lambda: bot.localslack.home_view(CAROL))
        assert find(home.blocks, "approvers:edit:refund_charge")["initial_users"] == [BOB]
        await governance(bot).policies.remove_approvers(TEAM_ID, "tool:refund_charge", actor="admin")
    finally:
        await bot.close()

    again = await start_bot(offline(), host="127.0.0.1", port=0, recovery_interval=0)
    try:
        await again.wait_idle()
        assert await governance(again).policies.approvers(TEAM_ID, "tool:refund_charge") is None, \
            "an admin's change is never undone by the demo seed"
    finally:
        await again.close()


async def test_empty_states_say_what_to_do_next(local_slack, start_app):
    await start_app(ScriptedModel([]), [])
    await local_slack.slash_command(CAROL, "/approvers", "list")
    [reply] = await local_slack.wait_for(lambda: local_slack.ephemerals(CAROL))
    assert "nothing to set up" in reply.text and "BOT_TOOLS" in reply.text
    home = await open_home(local_slack, ALICE)
    text = json.dumps(home.blocks)
    assert "Nothing is waiting on you" in text and "You have no open requests" in text
    await local_slack.slash_command(ALICE, "/approvers", "what")
    usage = await local_slack.wait_for(lambda: [e for e in local_slack.ephemerals(ALICE) if "/approvers edit" in e.text])
    assert "/approvers list" in usage[-1].text


async def test_admin_check_fails_closed_when_slack_cannot_say(local_slack, start_app):
    bot = await start_app(ScriptedModel([]), ALL_TOOLS)
    local_slack.fail_next("users.info", error="internal_error")
    await local_slack.slash_command(CAROL, "/approvers", "edit")
    refusal = await loaded_modal(local_slack, CAROL)
    assert "Couldn't check your admin rights just now; try again. Nothing was changed." in json.dumps(refusal.blocks)
    assert refusal.callback_id != "approvers_edit" and refusal.submit is None
    [refused] = await audit_entries(bot, "policy.refused")
    assert refused.data["reason"] == "admin check failed"
    await local_slack.slash_command(CAROL, "/approvers", "edit")  # Slack answers again
    assert (await loaded_modal(local_slack, CAROL, replacing=refusal)).callback_id == "approvers_edit"


async def test_a_refusal_in_app_home_reaches_someone_outside_the_channel_by_direct_message(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(script("pay_vendor", target="hooli"), ALL_TOOLS)
    local_slack.add_channel("C0PRIVATE", "deals", members=[ALICE, BOT_USER_ID])  # bob is not in it
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    ts, _ = await local_slack.post_message(ALICE, "C0PRIVATE", f"<@{BOT_USER_ID}> pay hooli")
    await local_slack.wait_for(lambda: any(b.get("type") == "actions" for m in
                                           local_slack.messages("C0PRIVATE", thread_ts=ts) for b in m.blocks or []))
    bob = await open_home(local_slack, BOB)
    approve = next(e for e in elements(bob.blocks) if e.get("type") == "button" and e["text"]["text"] == "Approve")
    # bob leaves the list while his Home still shows the request: his click there is refused
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [CAROL], actor="test")
    await local_slack.click_in_view(BOB, bob.id, approve["action_id"])
    [opened] = await local_slack.wait_for(lambda: local_slack.calls_to("conversations.open"))
    dm = opened.response["channel"]["id"]
    note = await local_slack.wait_for_message(dm, predicate=lambda m: "can't answer" in m.text)
    assert f"<@{CAROL}>" in note.text  # and who may approve instead
    assert RUNS == []


async def test_a_slack_connect_guest_cannot_start_a_turn_unless_the_workspace_admits_outsiders(local_slack, start_app):
    RUNS.clear()
    bot = await start_app(script("pay_vendor", target="initech"), ALL_TOOLS)
    ts, deliveries = await local_slack.post_message(ERIN, GENERAL, f"<@{BOT_USER_ID}> pay initech")
    assert deliveries and all(d.status == 200 for d in deliveries)
    [note] = await local_slack.wait_for(lambda: local_slack.ephemerals(ERIN))
    assert "Only people of this workspace can ask the agent" in note.text
    await bot.wait_idle()
    assert not await bot.store.exists(f"slack:{TEAM_ID}:{GENERAL}:{ts}"), "nothing was started or queued"
    assert card_in(local_slack, ts) is None
    await governance(bot).policies.set_allow_external(TEAM_ID, True, actor="test")
    ts, _ = await local_slack.post_message(ERIN, GENERAL, f"<@{BOT_USER_ID}> pay initech")
    assert await local_slack.wait_for(lambda: card_in(local_slack, ts))
    assert len(local_slack.ephemerals(ERIN)) == 1, "told once, not once per event"


@tool(approval=Approval(request=always(), response=approvers("tool:finance_team")),
      escalate_after=3600, escalate_to="tool:finance_managers")
async def pay_invoice(args: Job, ctx: ToolContext) -> dict:
    """Pay an invoice (the finance team approves; its managers step in after an hour)."""
    RUNS.append(("pay_invoice", ctx.principal.slack_user_id if ctx.principal else None))
    return {"paid": args.target}


async def test_the_editor_offers_the_lists_rules_read_and_refuses_one_no_rule_reads(local_slack, start_app):
    """A list named for a team, not a tool, and an escalation list are offered and saved where the rule
    reads them; a forged edit of a list no rule reads (``deploy`` is four-eyes) saves nothing."""
    RUNS.clear()
    bot = await start_app(script("pay_invoice", target="acme"), [*ALL_TOOLS, pay_invoice])
    home = await open_home(local_slack, CAROL)
    assert find(home.blocks, "approvers:edit:pay_invoice") is None
    text = json.dumps(home.blocks)
    assert "approves `pay_invoice`" in text and "`pay_invoice` escalates to it after 1 h" in text
    await local_slack.select_users(CAROL, home.id, "approvers:edit:finance_team", [BOB])
    home = await open_home(local_slack, CAROL)
    await local_slack.select_users(CAROL, home.id, "approvers:edit:finance_managers", [DAVE])
    policies = governance(bot).policies
    assert (await policies.approvers(TEAM_ID, "tool:finance_team")).approvers == [BOB]
    assert (await policies.approvers(TEAM_ID, "tool:finance_managers")).approvers == [DAVE]

    ts, card = await mention_and_wait_for_card(local_slack, "pay the acme invoice")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Approve"))  # the list the rule reads
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert RUNS == [("pay_invoice", BOB)]

    result = await forged_home_edit(local_slack, CAROL, "approvers:edit:deploy", [DAVE])
    assert result.status == 200
    assert await policies.approvers(TEAM_ID, "tool:deploy") is None
    note = await local_slack.wait_for_message(local_slack.dm_channel(CAROL),
                                              predicate=lambda m: "was not changed" in m.text)
    assert "no tool's rule reads a list called deploy" in note.text


async def test_an_admin_opens_one_channel_to_slack_connect_guests_and_only_that_one(local_slack, start_app):
    """``/approvers guests on`` admits guests where it is run (audited), not elsewhere; a member can't
    run it; ``off`` closes the channel again."""
    from store.audit import AuditLog

    RUNS.clear()
    bot = await start_app(script("pay_vendor", target="initech"), ALL_TOOLS)

    async def guest_asks() -> str:
        ts, _ = await local_slack.post_message(ERIN, GENERAL, f"<@{BOT_USER_ID}> pay initech")
        await bot.wait_idle()
        return ts

    await local_slack.slash_command(CAROL, "/approvers", "guests on", channel_id=FINANCE)  # another channel
    await local_slack.wait_for(lambda: any("can now ask" in e.text for e in local_slack.ephemerals(CAROL)))
    ts = await guest_asks()
    assert card_in(local_slack, ts) is None  # #finance being open changes nothing in #general

    await local_slack.slash_command(DAVE, "/approvers", "guests on", channel_id=GENERAL)
    refused = await local_slack.wait_for(lambda: local_slack.ephemerals(DAVE))
    assert "Only workspace admins" in refused[-1].text
    ts = await guest_asks()
    assert card_in(local_slack, ts) is None

    await local_slack.slash_command(CAROL, "/approvers", "guests on", channel_id=GENERAL)
    await local_slack.wait_for(lambda: sum("can now ask" in e.text for e in local_slack.ephemerals(CAROL)) == 2)
    ts = await guest_asks()
    assert await local_slack.wait_for(lambda: card_in(local_slack, ts))

    await local_slack.slash_command(CAROL, "/approvers", "guests off", channel_id=GENERAL)
    await local_slack.wait_for(lambda: any("can no longer ask" in e.text for e in local_slack.ephemerals(CAROL)))
    before = len(local_slack.ephemerals(ERIN))
    ts = await guest_asks()
    assert card_in(local_slack, ts) is None and len(local_slack.ephemerals(ERIN)) == before + 1

    entries = await AuditLog(bot.redis.client).entries(TEAM_ID, limit=None)
    changes = [(e.kind, e.subject) for e in entries if e.kind in ("policy.change", "policy.refused")]
    assert changes == [("policy.change", f"channel:{FINANCE}"), ("policy.refused", f"channel:{GENERAL}"),
                       ("policy.change", f"channel:{GENERAL}"), ("policy.change", f"channel:{GENERAL}")]
