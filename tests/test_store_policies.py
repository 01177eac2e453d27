"""Workspace approval policies on a real Redis (store/policies.py), and the pure rule matcher."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as redis_asyncio
from pydantic import ValidationError
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from store.audit import AuditLog
from store.policies import (
    Condition,
    PolicyStore,
    Rule,
    TenantPolicy,
    ToolPolicy,
    match_rule,
)

TEAM = "T0001"
ADMIN = "slack:T0001:UADMIN"


@pytest.fixture
def audit(redis: redis_asyncio.Redis) -> AuditLog:
    return AuditLog(redis)


@pytest.fixture
def store(redis: redis_asyncio.Redis, audit: AuditLog) -> PolicyStore:
    return PolicyStore(redis, audit)


async def test_a_workspace_never_edited_has_an_empty_policy(store: PolicyStore) -> None:
    policy = await store.get(TEAM)
    assert policy == TenantPolicy(team_id=TEAM)
    assert policy.version == 0 and not policy.allow_external
    assert await store.approvers(TEAM, "tool:refund_charge") is None


async def test_set_approvers_is_stored_versioned_and_audited(
    redis: redis_asyncio.Redis, store: PolicyStore, audit: AuditLog
) -> None:
    saved = await store.set_approvers(
        TEAM, "tool:refund_charge", ["U1", "U2", "U1 "], actor=ADMIN, required=2
    )
    assert saved.approvers == ["U1", "U2"]
    assert saved.required_approvals == 2
    assert saved.updated_by == ADMIN and saved.updated_at is not None

    # A fresh store (another replica) reads the same thing from Redis.
    again = PolicyStore(redis, AuditLog(redis))
    assert await again.approvers(TEAM, "tool:refund_charge") == saved
    assert (await again.get(TEAM)).version == 1

    updated = await store.set_approvers(TEAM, "tool:refund_charge", ["U3"], actor=ADMIN, required=1)
    assert updated.approvers == ["U3"]
    assert (await store.get(TEAM)).version == 2

    changes = await audit.entries(TEAM, kind="policy.change")
    assert [(e.actor, e.subject) for e in changes] == [(ADMIN, "tool:refund_charge")] * 2
    assert changes[0].data["before"] is None
    assert changes[0].data["after"]["approvers"] == ["U1", "U2"]
    assert changes[1].data["before"]["approvers"] == ["U1", "U2"]
    assert changes[1].data["after"]["approvers"] == ["U3"]
    assert [e.data["version"] for e in changes] == [1, 2]
    assert (await audit.verify(TEAM)).ok


async def test_saving_the_same_list_again_changes_nothing(store: PolicyStore, audit: AuditLog) -> None:
    first = await store.set_approvers(TEAM, "tool:deploy", ["U1"], actor=ADMIN)
    second = await store.set_approvers(TEAM, "tool:deploy", ["U1"], actor="slack:T0001:UOTHER")
    assert second == first
    assert (await store.get(TEAM)).version == 1
    assert len(await audit.entries(TEAM)) == 1


async def test_required_keeps_its_value_when_not_given(store: PolicyStore) -> None:
    await store.set_approvers(TEAM, "tool:deploy", ["U1", "U2", "U3"], actor=ADMIN, required=2)
    kept = await store.set_approvers(TEAM, "tool:deploy", ["U1", "U2"], actor=ADMIN)
    assert kept.required_approvals == 2


async def test_impossible_lists_are_refused_and_nothing_is_written(
    store: PolicyStore, audit: AuditLog
) -> None:
    with pytest.raises(ValueError, match="needs 3 distinct approvers but only 2"):
        await store.set_approvers(TEAM, "tool:deploy", ["U1", "U2"], actor=ADMIN, required=3)
    with pytest.raises(ValueError, match="at least one approver"):
        await store.set_approvers(TEAM, "tool:deploy", [], actor=ADMIN)
    with pytest.raises(ValueError, match="Slack user id"):
        await store.set_approvers(TEAM, "tool:deploy", ["slack:T0001:U1"], actor=ADMIN)
    with pytest.raises(ValueError, match="resource"):
        await store.set_approvers(TEAM, "refund charge", ["U1"], actor=ADMIN)
    with pytest.raises(ValidationError):
        await store.set_approvers(TEAM, "tool:deploy", ["U1"], actor=ADMIN, required=0)
    assert (await store.get(TEAM)).version == 0
    assert await audit.entries(TEAM) == []


async def test_groups_are_roles_and_count_toward_the_required_number(store: PolicyStore) -> None:
    await store.set_roles(TEAM, "finance", ["UF1", "UF2"], actor=ADMIN)
    tool_policy = await store.set_approvers(
        TEAM, "tool:refund_charge", ["U1"], actor=ADMIN, groups=["finance"], required=3
    )
    assert tool_policy.approver_groups == ["finance"]
    policy = await store.get(TEAM)
    assert policy.eligible_approvers("tool:refund_charge") == {"U1", "UF1", "UF2"}
    assert policy.roles_of("UF2") == {"finance"}
    assert policy.roles_of("U1") == set()

    # Removing a role's members and the role itself.
    assert await store.set_roles(TEAM, "finance", [], actor=ADMIN) == []
    assert "finance" not in (await store.get(TEAM)).roles


async def test_glob_approver_lists_cover_matching_resources(store: PolicyStore) -> None:
    await store.set_approvers(TEAM, "connection:billing__*", ["UB"], actor=ADMIN)
    await store.set_approvers(TEAM, "connection:billing__refund*", ["UR"], actor=ADMIN)
    await store.set_approvers(TEAM, "connection:billing__refund_charge", ["UX"], actor=ADMIN)
    assert (await store.approvers(TEAM, "connection:billing__refund_charge")).approvers == ["UX"]
    assert (await store.approvers(TEAM, "connection:billing__refund_all")).approvers == ["UR"]
    assert (await store.approvers(TEAM, "connection:billing__listInvoices")).approvers == ["UB"]
    assert await store.approvers(TEAM, "connection:support__search") is None


async def test_remove_approvers(store: PolicyStore, audit: AuditLog) -> None:
    await store.set_approvers(TEAM, "tool:deploy", ["U1"], actor=ADMIN)
    assert await store.remove_approvers(TEAM, "tool:deploy", actor=ADMIN) is True
    assert await store.approvers(TEAM, "tool:deploy") is None
    assert await store.remove_approvers(TEAM, "tool:deploy", actor=ADMIN) is False
    removal = (await audit.entries(TEAM, kind="policy.change"))[-1]
    assert removal.data["change"] == "remove_approvers"
    assert removal.data["before"]["approvers"] == ["U1"] and removal.data["after"] is None


async def test_twenty_concurrent_edits_from_twenty_replicas_all_survive(
    redis: redis_asyncio.Redis, redis_url: str
) -> None:
    clients = [redis_asyncio.Redis.from_url(redis_url, decode_responses=False) for _ in range(20)]
    try:
        stores = [PolicyStore(client, AuditLog(client)) for client in clients]
        await asyncio.gather(
            *(s.set_approvers(TEAM, f"tool:tool_{i}", [f"U{i}"], actor=ADMIN) for i, s in enumerate(stores))
        )
    finally:
        for client in clients:
            await client.aclose()

    policy = await PolicyStore(redis, AuditLog(redis)).get(TEAM)
    assert sorted(policy.tools) == sorted(f"tool:tool_{i}" for i in range(20))
    assert all(policy.tools[f"tool:tool_{i}"].approvers == [f"U{i}"] for i in range(20))
    assert policy.version == 20
    audit = AuditLog(redis)
    changes = await audit.entries(TEAM, kind="policy.change")
    assert sorted(e.data["version"] for e in changes) == list(range(1, 21))
    assert (await audit.verify(TEAM)).ok


async def test_concurrent_edits_within_one_process_all_survive(store: PolicyStore) -> None:
    await asyncio.gather(*(store.set_roles(TEAM, f"role{i}", [f"U{i}"], actor=ADMIN) for i in range(15)))
    assert len((await store.get(TEAM)).roles) == 15


async def test_rules_are_added_replaced_removed_and_audited(store: PolicyStore, audit: AuditLog) -> None:
    rule = Rule(
        resource="tool:refund_charge",
        effect="require_approval",
        condition=Condition(field="amount", op=">", value=1000),
        description="large refunds",
    )
    assert await store.add_rule(TEAM, rule, actor=ADMIN) == rule
    edited = rule.model_copy(update={"effect": "deny"})
    await store.add_rule(TEAM, edited, actor=ADMIN)
    assert (await store.get(TEAM)).rules == [edited]

    assert await store.remove_rule(TEAM, rule.id, actor=ADMIN) == edited
    assert await store.remove_rule(TEAM, rule.id, actor=ADMIN) is None
    assert (await store.get(TEAM)).rules == []

    changes = [e.data["change"] for e in await audit.entries(TEAM, kind="policy.change")]
    assert changes == ["add_rule", "add_rule", "remove_rule"]


async def test_allow_external_and_refusals(store: PolicyStore, audit: AuditLog) -> None:
    assert await store.set_allow_external(TEAM, True, actor=ADMIN) is True
    assert (await store.get(TEAM)).allow_external is True

    refused = await store.record_refusal(TEAM, "slack:T0001:UNOBODY", "set_approvers tool:deploy")
    assert refused.kind == "policy.refused"
    assert refused.actor == "slack:T0001:UNOBODY"
    assert refused.data["what"] == "set_approvers tool:deploy"
    assert [e.kind for e in await audit.entries(TEAM)] == ["policy.change", "policy.refused"]


async def test_workspaces_do_not_share_policies(store: PolicyStore) -> None:
    await store.set_approvers("TA", "tool:deploy", ["U1"], actor="slack:TA:UADMIN")
    assert await store.approvers("TB", "tool:deploy") is None


async def test_unreachable_redis_raises_so_callers_fail_closed(tmp_path: Path) -> None:
    client = redis_asyncio.Redis(unix_socket_path=str(tmp_path / "nothing.sock"), retry=Retry(NoBackoff(), 0))
    try:
        dead = PolicyStore(client, AuditLog(client))
        with pytest.raises(RedisConnectionError):
            await dead.approvers(TEAM, "tool:deploy")
        with pytest.raises(RedisConnectionError):
            await dead.set_approvers(TEAM, "tool:deploy", ["U1"], actor=ADMIN)
    finally:
        await client.aclose()


# --- the pure matcher -------------------------------------------------------------------------


def _policy(*rules: Rule) -> TenantPolicy:
    return TenantPolicy(team_id=TEAM, rules=list(rules))


def test_no_rules_no_match() -> None:
    assert match_rule(_policy(), "tool:anything", {}, set()) is None


def test_exact_rule_beats_wildcards_regardless_of_order() -> None:
    everything = Rule(resource="*", effect="deny")
    tools = Rule(resource="tool:*", effect="require_approval")
    refunds = Rule(resource="tool:refund_*", effect="require_approval")
    exact = Rule(resource="tool:refund_charge", effect="allow")
    policy = _policy(everything, tools, refunds, exact)
    assert match_rule(policy, "tool:refund_charge", {}, set()) == exact
    assert match_rule(policy, "tool:refund_all", {}, set()) == refunds
    assert match_rule(policy, "tool:deploy", {}, set()) == tools
    assert match_rule(policy, "connection:billing__x", {}, set()) == everything


def test_wildcards_only_treat_star_as_special() -> None:
    dotted = Rule(resource="connection:billing.v1__*", effect="deny")
    policy = _policy(dotted)
    assert match_rule(policy, "connection:billing.v1__refund", None, set()) == dotted
    assert match_rule(policy, "connection:billingXv1__refund", None, set()) is None
    assert (
        match_rule(_policy(Rule(resource="tool:a*c", effect="deny")), "tool:abbbc", None, set()) is not None
    )


def test_threshold_condition_asks_only_for_large_amounts() -> None:
    allow = Rule(resource="tool:refund_charge", effect="allow")
    large = Rule(
        resource="tool:refund_charge",
        effect="require_approval",
        condition=Condition(field="amount", op=">", value=1000),
    )
    policy = _policy(allow, large)
    assert match_rule(policy, "tool:refund_charge", {"amount": 5000}, set()) == large
    assert match_rule(policy, "tool:refund_charge", {"amount": 1000}, set()) == allow
    assert match_rule(policy, "tool:refund_charge", {"amount": 10.5}, set()) == allow


@pytest.mark.parametrize(
    ("op", "value", "amount", "holds"),
    [
        (">", 10, 11, True),
        (">", 10, 10, False),
        (">=", 10, 10, True),
        ("<", 10, 9.99, True),
        ("<", 10, 10, False),
        ("<=", 10, 10, True),
        ("==", 10, 10.0, True),
        ("==", 10, 11, False),
        ("!=", 10, 11, True),
        ("!=", 10, 10, False),
    ],
)
def test_condition_operators(op: str, value: float, amount: float, holds: bool) -> None:
    assert Condition(field="amount", op=op, value=value).holds({"amount": amount}) is holds


@pytest.mark.parametrize(
    "tool_input",
    [
        None,
        {},
        {"amount": None},
        {"amount": "5000"},
        {"amount": True},
        {"amount": [5000]},
    ],
)
def test_condition_on_missing_or_non_numeric_field_does_not_hold(tool_input: dict | None) -> None:
    condition = Condition(field="amount", op="!=", value=0)
    assert condition.holds(tool_input) is False
    rule = Rule(resource="tool:refund_charge", effect="deny", condition=condition)
    assert match_rule(_policy(rule), "tool:refund_charge", tool_input, set()) is None


NON_FINITE = [float("inf"), float("-inf"), float("nan")]


@pytest.mark.parametrize("amount", NON_FINITE, ids=repr)
def test_a_non_finite_number_leaves_a_condition_undecided(amount: float) -> None:
    for op in (">", ">=", "<", "<=", "==", "!="):
        condition = Condition(field="amount", op=op, value=1000)
        assert condition.evaluate({"amount": amount}) is None
        assert condition.holds({"amount": amount}) is False
    assert Condition(field="amount", op=">", value=1).evaluate({"amount": 5}) is True
    assert Condition(field="amount", op=">", value=1).evaluate({"amount": "5"}) is False


@pytest.mark.parametrize("amount", NON_FINITE, ids=repr)
def test_an_undecided_condition_asks_a_person_instead_of_being_skipped(amount: float) -> None:
    allow = Rule(resource="tool:refund_charge", effect="allow")
    large = Rule(resource="tool:refund_charge", effect="require_approval",
                 condition=Condition(field="amount", op=">", value=1000), description="Large refunds need a person.")
    small_ok = Rule(resource="tool:refund_charge", effect="allow", condition=Condition(field="amount", op="<", value=10))
    for policy in (_policy(allow, large), _policy(small_ok), _policy(small_ok, allow)):
        decided = match_rule(policy, "tool:refund_charge", {"amount": amount}, set())
        assert decided is not None and decided.effect == "require_approval", policy.rules
        assert "amount" in decided.description
    assert match_rule(_policy(allow, large), "tool:refund_charge", {"amount": 5}, set()) == allow


@pytest.mark.parametrize("amount", NON_FINITE, ids=repr)
def test_an_undecided_condition_never_softens_a_deny(amount: float) -> None:
    huge_denied = Rule(resource="tool:refund_charge", effect="deny", condition=Condition(field="amount", op=">", value=1e6))
    small_ok = Rule(resource="tool:refund_charge", effect="allow", condition=Condition(field="amount", op="<", value=10))
    everything_denied = Rule(resource="tool:*", effect="deny")
    assert match_rule(_policy(huge_denied), "tool:refund_charge", {"amount": amount}, set()) == huge_denied
    # the undecided allow could fall through to a deny: the stricter outcome wins
    assert match_rule(_policy(small_ok, everything_denied), "tool:refund_charge", {"amount": amount}, set()) \
        == everything_denied


def test_condition_reads_nested_fields() -> None:
    condition = Condition(field="payment.amount", op=">=", value=100)
    assert condition.holds({"payment": {"amount": 100}})
    assert not condition.holds({"payment": 100})
    assert condition.describe() == "payment.amount >= 100"


def test_role_rules_apply_only_to_holders_of_those_roles() -> None:
    finance_allow = Rule(resource="tool:refund_charge", effect="allow", roles=["finance"])
    default_ask = Rule(resource="tool:refund_charge", effect="require_approval")
    policy = _policy(default_ask, finance_allow)
    assert match_rule(policy, "tool:refund_charge", {}, {"finance"}) == finance_allow
    assert match_rule(policy, "tool:refund_charge", {}, {"engineering"}) == default_ask
    assert match_rule(policy, "tool:refund_charge", {}, set()) == default_ask


def test_equally_specific_rules_pick_the_stricter_effect() -> None:
    allow = Rule(resource="tool:deploy", effect="allow")
    ask = Rule(resource="tool:deploy", effect="require_approval")
    deny = Rule(resource="tool:deploy", effect="deny")
    assert match_rule(_policy(allow, ask, deny), "tool:deploy", {}, set()) == deny
    assert match_rule(_policy(allow, ask), "tool:deploy", {}, set()) == ask
    finance_allow = Rule(resource="tool:deploy", effect="allow", roles=["finance"])
    big_ask = Rule(
        resource="tool:deploy", effect="require_approval", condition=Condition(field="n", op=">", value=5)
    )
    assert match_rule(_policy(finance_allow, big_ask), "tool:deploy", {"n": 9}, {"finance"}) == big_ask
    assert match_rule(_policy(finance_allow, big_ask), "tool:deploy", {"n": 1}, {"finance"}) == finance_allow


def test_models_reject_malformed_input() -> None:
    with pytest.raises(ValidationError):
        Rule(resource="refund", effect="allow")
    with pytest.raises(ValidationError):
        Rule(resource="tool:x", effect="maybe")
    with pytest.raises(ValidationError):
        Condition(field="amount", op="~=", value=1)
    with pytest.raises(ValidationError):
        ToolPolicy(resource="tool:x", approvers=["U 1"])
    with pytest.raises(ValidationError):
        TenantPolicy(team_id=TEAM, tools={"tool:a": ToolPolicy(resource="tool:b", approvers=["U1"])})
