"""The response-policy helpers and the tenant adapter (bot/governance.py) against the real Redis policy store."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis_asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from bot.approval import (
    AnswerersContext,
    ApprovalContext,
    RequestView,
    ResponseContext,
    ResponseView,
    describe_responders,
    evaluate_request_policy,
    evaluate_response_policy,
    rejected,
    requester_only,
)
from bot.engine.policy_source import StorePolicySource
from bot.governance import STORE_DOWN, PolicySource, approvers, four_eyes, n_of_m, tenant_policy
from bot.principals import APP_PRINCIPAL, Principal, slack_user
from bot.session import SessionAuth, SessionInfo
from store.audit import AuditLog
from store.policies import Condition, PolicyStore, Rule

T = "T1"
ALICE, BOB, CAROL, DAVE = (slack_user(T, u) for u in ("UALICE", "UBOB", "UCAROL", "UDAVE"))
PARTNER = slack_user(T, "UPARTNER", user_team_id="T2")  # Slack Connect: keyed by our installation
# the policy source the fixtures give the policies: the runtime passes its own in every context (ctx.policies)
SOURCE: list[PolicySource | None] = [None]


def give_policies(source: PolicySource | None) -> None:
    SOURCE[0] = source


@pytest.fixture
async def policies(redis) -> AsyncIterator[PolicyStore]:
    source = StorePolicySource(PolicyStore(redis, AuditLog(redis)))
    give_policies(source)
    yield source.policies
    give_policies(None)


@pytest.fixture
async def dead_store() -> AsyncIterator[None]:
    """A policy source whose Redis is not there (nothing listens on the port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = redis_asyncio.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.2, socket_timeout=0.2,
                                 retry=Retry(NoBackoff(), retries=0))
    give_policies(StorePolicySource(PolicyStore(client, AuditLog(client))))
    yield
    give_policies(None)
    await client.aclose()


def answer(requester: Principal | None, responder: Principal, decision: str = "approve") -> ResponseContext:
    return ResponseContext(
        request=RequestView(request_id="r1", tool_name="refund", principal=requester),
        response=ResponseView(decision=decision, principal=responder),
        session=SessionInfo(id="s1", team_id=T, auth=SessionAuth(current=requester, initiator=requester)),
        policies=SOURCE[0],
    )


async def decide(policy, ctx):
    return await evaluate_response_policy(policy, ctx)


# --- approvers(resource) --------------------------------------------------------------------


async def test_approvers_allows_listed_people_only(policies):
    await policies.set_approvers(T, "tool:refund", ["UBOB", "UCAROL"], actor="admin")
    policy = approvers("tool:refund")
    assert (await decide(policy, answer(ALICE, BOB))).type == "allowed"
    refused = await decide(policy, answer(ALICE, DAVE))
    assert refused.type == "rejected" and "<@UBOB>" in refused.reason
    assert (await decide(policy, answer(ALICE, ALICE))).type == "rejected", "asking is not approving"
    assert (await decide(policy, answer(ALICE, ALICE, "cancel"))).type == "allowed", "the requester may cancel"


async def test_an_approver_cannot_approve_their_own_request_unless_allowed(policies):
    await policies.set_approvers(T, "tool:refund", ["UBOB", "UCAROL"], actor="admin")
    refused = await decide(approvers("tool:refund"), answer(BOB, BOB))
    assert refused.type == "rejected" and "your own request" in refused.reason
    assert (await decide(approvers("tool:refund"), answer(BOB, CAROL))).type == "allowed"
    assert (await decide(approvers("tool:refund"), answer(BOB, BOB, "cancel"))).type == "allowed"
    assert (await decide(approvers("tool:refund", allow_self=True), answer(BOB, BOB))).type == "allowed"
    shown = await describe_responders(approvers("tool:refund"), asked_by(BOB))
    assert ids(shown) == ["UCAROL"], "the card does not offer the requester as their own approver"


async def test_approvers_counts_group_members_and_required(policies):
    await policies.set_roles(T, "finance", ["UDAVE"], actor="admin")
    await policies.set_approvers(T, "tool:refund", ["UBOB"], groups=["finance"], required=2, actor="admin")
    decision = await decide(approvers("tool:refund"), answer(ALICE, DAVE))
    assert decision.type == "allowed" and decision.required == 2


async def test_approvers_with_nobody_listed_says_what_to_do(policies):
    refused = await decide(approvers("tool:refund"), answer(ALICE, BOB))
    assert refused.type == "rejected" and "/approvers" in refused.reason


async def test_approvers_refuses_external_people_unless_allowed(policies):
    await policies.set_approvers(T, "tool:refund", ["UPARTNER"], actor="admin")
    refused = await decide(approvers("tool:refund"), answer(ALICE, PARTNER))
    assert refused.type == "rejected" and "other workspaces" in refused.reason
    await policies.set_allow_external(T, True, actor="admin")
    assert (await decide(approvers("tool:refund"), answer(ALICE, PARTNER))).type == "allowed"


async def test_approvers_refuses_a_clicker_from_another_installation(policies):
    await policies.set_approvers(T, "tool:refund", ["UBOB"], actor="admin")
    elsewhere = slack_user("T9", "UBOB")
    refused = await decide(approvers("tool:refund"), answer(ALICE, elsewhere))
    assert refused.type == "rejected" and "your own workspace" in refused.reason


async def test_store_down_rejects_with_store_down_never_allows(dead_store):
    for policy in (approvers("tool:refund"), n_of_m(2, "tool:refund"), four_eyes("tool:refund")):
        decision = await decide(policy, answer(ALICE, BOB))
        assert decision.type == "rejected" and decision.reason == STORE_DOWN, policy


async def test_no_policy_source_rejects():
    give_policies(None)
    decision = await decide(approvers("tool:refund"), answer(ALICE, BOB))
    assert decision.type == "rejected" and decision.reason == STORE_DOWN


# --- four_eyes / n_of_m ---------------------------------------------------------------------


async def test_four_eyes(policies):
    policy = four_eyes()
    own = await decide(policy, answer(ALICE, ALICE))
    assert own.type == "rejected" and "Four-eyes" in own.reason
    assert (await decide(policy, answer(ALICE, BOB))).type == "allowed"
    assert (await decide(policy, answer(ALICE, ALICE, "cancel"))).type == "allowed"
    assert (await decide(policy, answer(ALICE, BOB, "cancel"))).type == "rejected"
    assert (await decide(policy, answer(ALICE, PARTNER))).type == "rejected"


async def test_n_of_m_asks_for_n_listed_people_and_never_the_requester(policies):
    await policies.set_approvers(T, "tool:rotate", ["UBOB", "UCAROL", "UDAVE"], actor="admin")
    policy = n_of_m(2, "tool:rotate")
    decision = await decide(policy, answer(ALICE, BOB))
    assert decision.type == "allowed" and decision.required == 2
    assert (await decide(policy, answer(ALICE, ALICE))).type == "rejected"
    assert (await decide(policy, answer(ALICE, slack_user(T, "USTRANGER")))).type == "rejected"
    unlisted = await decide(n_of_m(3), answer(ALICE, slack_user(T, "USTRANGER")))
    assert unlisted.type == "allowed" and unlisted.required == 3


# --- tenant_policy --------------------------------------------------------------------------


def call_ctx(tool_input: dict | None, current: Principal | None = ALICE, initiator: Principal | None = ALICE,
             team: str | None = T) -> ApprovalContext:
    return ApprovalContext(
        session=SessionInfo(id="s1", team_id=team, auth=SessionAuth(current=current, initiator=initiator)),
        tool_name="refund", tool_input=tool_input, call_id="c1", policies=SOURCE[0],
    )


async def status(ctx: ApprovalContext, resource: str = "tool:refund"):
    return await evaluate_request_policy(tenant_policy(resource), ctx)


async def test_tenant_policy_decides_from_rules_default_deny(policies):
    assert (await status(call_ctx({"amount": 5}))).type == "denied"
    await policies.add_rule(T, Rule(resource="tool:*", effect="allow"), actor="admin")
    await policies.add_rule(T, Rule(resource="tool:refund", effect="require_approval",
                                    condition=Condition(field="amount", op=">", value=1000)), actor="admin")
    assert (await status(call_ctx({"amount": 5}))).type == "not-applicable"
    assert (await status(call_ctx({"amount": 5000}))).type == "user-approval"
    await policies.set_roles(T, "interns", ["UALICE"], actor="admin")
    await policies.add_rule(T, Rule(resource="tool:refund", effect="deny", roles=["interns"],
                                    description="Interns can't refund."), actor="admin")
    denied = await status(call_ctx({"amount": 5}))
    assert denied.type == "denied" and denied.reason == "Interns can't refund."
    assert (await status(call_ctx({"amount": 5}, current=BOB, initiator=BOB))).type == "not-applicable"


async def test_tenant_policy_denies_other_tenants_and_unpinned_sessions(policies):
    await policies.add_rule(T, Rule(resource="tool:refund", effect="allow"), actor="admin")
    assert (await status(call_ctx({"team_id": T}))).type == "not-applicable"
    named = await status(call_ctx({"team_id": "T2"}))
    assert named.type == "denied" and "another workspace" in named.reason
    assert (await status(call_ctx({"tenant": "T2"}))).type == "denied"
    for current, initiator, team in ((APP_PRINCIPAL, ALICE, T), (ALICE, slack_user("T2", "UX"), T),
                                     (ALICE, None, T), (ALICE, ALICE, None)):
        verdict = await status(call_ctx({}, current=current, initiator=initiator, team=team))
        assert verdict.type == "denied" and "single workspace" in verdict.reason


async def test_tenant_policy_store_down_denies(dead_store):
    verdict = await status(call_ctx({"amount": 1}))
    assert verdict.type == "denied" and "can't be read" in verdict.reason


@pytest.mark.parametrize(
    "tool_input",
    [
        {"team_id": T, "workspace_id": "T2"},  # a second tenant field that disagrees
        {"workspace_id": "T2", "team_id": T},
        {"target": {"team_id": "T2"}},  # nested
        {"items": [{"amount": 1}, {"workspace": "T2"}]},  # inside a list
        {"a": {"b": {"c": [{"d": {"tenant_id": "T2"}}]}}},
        {"teamId": "T2"},  # camelCase
        {"TEAM_ID": "T2"},
        {"tenant-id": "T2"},  # kebab-case
        {"workspaceID": "T2"},
        {"enterprise_id": "E2"},
        {"target_team_id": "T2"},  # a qualified tenant field
        {"team_ids": [T, "T2"]},
        {"team_id": [T, "T2"]},  # structured values under a tenant key
        {"team_id": [T]},
        {"team": {"id": T}},
        {"team_id": 1},
        {"team_id": True},
        {"team_id": None},
        {"team_id": ""},
        {"team_id": " T1"},
    ],
    ids=repr,
)
async def test_tenant_policy_denies_any_other_or_unclear_tenant_anywhere_in_the_input(policies, tool_input):
    await policies.add_rule(T, Rule(resource="tool:refund", effect="allow"), actor="admin")
    verdict = await status(call_ctx(tool_input))
    assert verdict.type == "denied", verdict
    assert "workspace" in verdict.reason


def nested(depth: int) -> dict:
    value: dict = {"amount": 1}
    for _ in range(depth):
        value = {"next": value}
    return value


async def test_tenant_policy_allows_the_session_workspace_everywhere_and_unrelated_keys(policies):
    await policies.add_rule(T, Rule(resource="tool:refund", effect="allow"), actor="admin")
    same = {"team_id": T, "target": {"workspaceId": T, "tenant": T}, "rows": [{"TEAM": T}],
            "steam": "x", "teammate": "U2", "team_name": "Finance", "home_team_size": 3}
    assert (await status(call_ctx(same))).type == "not-applicable"
    assert (await status(call_ctx(nested(20)))).type == "not-applicable"


async def test_tenant_policy_denies_input_too_deep_or_too_large_to_inspect(policies):
    await policies.add_rule(T, Rule(resource="tool:refund", effect="allow"), actor="admin")
    deep = await status(call_ctx(nested(200)))
    assert deep.type == "denied" and "workspace" in deep.reason
    wide = await status(call_ctx({"rows": [{"n": i} for i in range(20_000)]}))
    assert wide.type == "denied" and "workspace" in wide.reason


@pytest.mark.parametrize("amount", ["1e999", "-1e999", "NaN", "Infinity", "-Infinity"])
async def test_tenant_rules_send_non_finite_amounts_to_a_person(policies, amount):
    tool_input = json.loads(f'{{"amount": {amount}}}')  # what a model's JSON arguments parse to
    await policies.add_rule(T, Rule(resource="tool:refund", effect="allow"), actor="admin")
    await policies.add_rule(T, Rule(resource="tool:refund", effect="require_approval",
                                    condition=Condition(field="amount", op=">", value=1000)), actor="admin")
    await policies.add_rule(T, Rule(resource="tool:refund", effect="require_approval",
                                    condition=Condition(field="amount", op="<", value=-1000)), actor="admin")
    asked = await status(call_ctx(tool_input))
    assert asked.type == "user-approval", asked
    assert "amount" in asked.reason


async def test_an_allow_rule_with_a_condition_never_allows_a_non_finite_amount(policies):
    await policies.add_rule(T, Rule(resource="tool:refund", effect="allow",
                                    condition=Condition(field="amount", op="<", value=100)), actor="admin")
    assert (await status(call_ctx({"amount": 5}))).type == "not-applicable"
    assert (await status(call_ctx({"amount": float("nan")}))).type == "user-approval"
    assert (await status(call_ctx({"amount": float("-inf")}))).type == "user-approval"


# --- Enterprise Grid: colleagues of the same org are not outsiders ----------------------------------

ORG, SALES, SUPPORT, PARTNER_TEAM = "E1", "T1SALES", "T1SUPPORT", "T2PARTNER"


def grid_answer(requester: Principal, responder: Principal) -> ResponseContext:
    return ResponseContext(
        request=RequestView(request_id="r1", tool_name="deploy", principal=requester),
        response=ResponseView(decision="approve", principal=responder),
        session=SessionInfo(id="s1", team_id=SUPPORT, enterprise_id=ORG,
                            auth=SessionAuth(current=requester, initiator=requester)),
        policies=SOURCE[0],
    )


@pytest.fixture
async def grid(redis) -> AsyncIterator[PolicyStore]:
    from store.installations import RedisInstallationStore

    workspaces = RedisInstallationStore(redis)
    # what verified requests said: both workspaces belong to the org, installed org-wide
    await workspaces.async_remember_workspace(SALES, ORG, True)
    await workspaces.async_remember_workspace(SUPPORT, ORG, True)
    await workspaces.async_remember_workspace(PARTNER_TEAM, "E2", False)
    source = StorePolicySource(PolicyStore(redis, AuditLog(redis)), workspaces)
    give_policies(source)
    yield source.policies
    give_policies(None)


async def test_a_colleague_from_another_workspace_of_the_org_may_approve(grid):
    chi = slack_user(SUPPORT, "WCHI", enterprise_id=ORG)
    dev = slack_user(SUPPORT, "WDEV", user_team_id=SALES, enterprise_id=ORG)  # home: Sales; acting in Support
    assert (await decide(four_eyes(), grid_answer(chi, dev))).type == "allowed"
    assert (await decide(n_of_m(1), grid_answer(chi, dev))).type == "allowed"
    await grid.set_approvers(SUPPORT, "tool:deploy", ["WDEV"], actor="admin")
    assert (await decide(approvers("tool:deploy"), grid_answer(chi, dev))).type == "allowed"
    # an org-wide install: the click arrives under the colleague's own workspace
    dev_at_home = slack_user(SALES, "WDEV", enterprise_id=ORG)
    assert (await decide(approvers("tool:deploy"), grid_answer(chi, dev_at_home))).type == "allowed"


async def test_a_slack_connect_partner_of_another_org_is_still_an_outsider(grid):
    chi = slack_user(SUPPORT, "WCHI", enterprise_id=ORG)
    for home in (PARTNER_TEAM, "T3UNSEEN"):  # another org, or a workspace nobody vouched for
        partner = slack_user(SUPPORT, "UPARTNER", user_team_id=home, enterprise_id=ORG)
        refused = await decide(four_eyes(), grid_answer(chi, partner))
        assert refused.type == "rejected" and "other workspaces" in refused.reason, home
    stranger = slack_user("T9", "UBOB", enterprise_id="E9")  # another installation, another org
    await grid.set_approvers(SUPPORT, "tool:deploy", ["UBOB"], actor="admin")
    refused = await decide(approvers("tool:deploy"), grid_answer(chi, stranger))
    assert refused.type == "rejected" and "your own workspace" in refused.reason


# --- who may answer: the helpers describe themselves for the card -----------------------------------

def asked_by(requester: Principal | None) -> AnswerersContext:
    return AnswerersContext(request=RequestView(request_id="r1", tool_name="refund", principal=requester),
                            session=SessionInfo(id="s1", team_id=T), policies=SOURCE[0])


def ids(responders) -> list[str]:  # noqa: ANN001
    return [p.slack_user_id for p in responders.people]


async def test_helpers_say_who_may_answer(policies):
    await policies.set_approvers(T, "tool:refund", ["UBOB", "UCAROL", "UALICE"], actor="admin")
    listed = await describe_responders(approvers("tool:refund", allow_self=True), asked_by(ALICE))
    assert (listed.rule, ids(listed), listed.required) == ("people", ["UALICE", "UBOB", "UCAROL"], 1)
    others = await describe_responders(four_eyes("tool:refund"), asked_by(ALICE))
    assert (others.rule, ids(others)) == ("people", ["UBOB", "UCAROL"])  # the requester never counts
    two = await describe_responders(n_of_m(2, "tool:refund"), asked_by(ALICE))
    assert (two.rule, ids(two), two.required) == ("people", ["UBOB", "UCAROL"], 2)
    anyone_else = await describe_responders(four_eyes(), asked_by(DAVE))
    assert (anyone_else.rule, ids(anyone_else)) == ("anyone_but", ["UDAVE"])
    only = await describe_responders(requester_only(), asked_by(ALICE))
    assert (only.rule, ids(only)) == ("requester", ["UALICE"])
    assert (await describe_responders(None, asked_by(ALICE))).rule == "requester"  # the default policy


async def test_an_empty_list_says_nobody_yet_and_a_custom_rule_says_so(policies):
    nobody = await describe_responders(approvers("tool:refund"), asked_by(ALICE))
    assert nobody.rule == "nobody" and "`refund`" in nobody.description

    def on_call(ctx):  # noqa: ANN001, ANN202
        return rejected("not on call")

    assert (await describe_responders(on_call, asked_by(ALICE))).rule == "custom"
    on_call.description = "Whoever is on call this week"
    described = await describe_responders(on_call, asked_by(ALICE))
    assert described.description == "Whoever is on call this week"


async def test_an_unreadable_list_describes_nothing(dead_store):
    assert await describe_responders(approvers("tool:refund"), asked_by(ALICE)) is None


# --- refusals say who may do what was tried -------------------------------


async def test_a_requester_off_the_list_is_told_who_may_approve(policies):
    await policies.set_approvers(T, "tool:refund", ["UBOB", "UCAROL"], actor="admin")
    refused = await decide(approvers("tool:refund"), answer(ALICE, ALICE))
    assert refused.reason == "Only <@UBOB> or <@UCAROL> can approve `refund`."


async def test_an_approver_asking_is_told_who_else_may_approve(policies):
    await policies.set_approvers(T, "tool:refund", ["UBOB", "UCAROL"], actor="admin")
    refused = await decide(approvers("tool:refund"), answer(BOB, BOB))
    assert refused.reason == "You can't approve your own request; only <@UCAROL> can."


async def test_someone_off_the_list_cancelling_is_told_who_may_cancel(policies):
    await policies.set_approvers(T, "tool:refund", ["UBOB"], actor="admin")
    for policy in (approvers("tool:refund"), four_eyes("tool:refund"), n_of_m(2, "tool:refund")):
        refused = await decide(policy, answer(ALICE, CAROL, "cancel"))
        assert refused.reason == "Only <@UALICE> (who asked), <@UBOB> or a workspace admin can cancel this request."


async def test_four_eyes_without_a_list_says_who_may_cancel(policies):
    refused = await decide(four_eyes(), answer(ALICE, CAROL, "cancel"))
    assert refused.reason == "Only <@UALICE> (who asked) or a workspace admin can cancel this request."
