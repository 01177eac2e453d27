"""Per-workspace approval policy: who may approve which tool, and rules that allow, deny or ask (DESIGN §6).

A workspace (Slack team = tenant) has one small :class:`TenantPolicy` document:

- ``tools``: per resource (``"tool:refund_charge"``, ``"connection:billing__refund"``), the Slack users and
  roles who may approve it and how many distinct people must (N-of-M, four-eyes);
- ``rules``: resource patterns (exact or ``*`` globs) that ``allow``, ``deny`` or ``require_approval``,
  optionally only for some roles and only when a numeric field of the tool input passes a threshold
  (``amount > 1000``), evaluated by the pure :func:`match_rule`;
- ``roles``: role name → Slack user ids;
- ``allow_external``: whether people from other organisations (Slack Connect) may approve.
- ``guest_channels``: channels where Slack Connect guests may talk to the agent (``/approvers guests on``).

Storage: the hash ``hitl:{ws:<team>}:policy`` (fields ``doc`` = the JSON document, ``version``). Every
change is read → modify → compare-and-set on ``version``, in the *same* atomic step as its
``policy.change`` audit entry (see :class:`store.audit.GuardedWrite`): a concurrent edit never loses an
update, and no change exists without its audit entry.

Who may edit is the caller's decision (admins only); refused attempts go to :meth:`PolicyStore.record_refusal`.

Failure: every method needs Redis and raises ``redis.exceptions.ConnectionError`` (or ``TimeoutError``)
when it is unreachable. Callers must fail closed: no policy read means no approval, never "allow".
"""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, field_validator, model_validator

from bot.deferred import DeferredModel
from store.audit import AuditEntry, AuditLog, GuardedWrite, VersionConflict, workspace_key
from store.client import RedisClient

Effect = Literal["allow", "deny", "require_approval"]
ConditionOp = Literal[">", ">=", "<", "<=", "==", "!="]

_RESOURCE = re.compile(r"^[a-z][a-z0-9_]*:\S+$")  # "tool:refund_charge", "connection:billing__*"
_USER_ID = re.compile(r"^[A-Za-z0-9_-]+$")  # a Slack user id ("U0123ABCD"), not a principal id
_ROLE = re.compile(r"^[A-Za-z0-9_.-]+$")
_MAX_UPDATE_ATTEMPTS = 100
# Among rules of equal pattern specificity and qualifiers, the stricter effect wins.
_STRICTNESS: dict[str, int] = {"deny": 2, "require_approval": 1, "allow": 0}
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


class PolicyUpdateConflict(RuntimeError):
    """Other writers kept changing the policy; this change was not applied."""


def _unique(values: Iterable[str]) -> list[str]:
    """Stripped, non-empty, first occurrence kept, order kept."""
    seen: dict[str, None] = {}
    for value in values:
        value = value.strip()
        if value:
            seen.setdefault(value, None)
    return list(seen)


def _check_user_ids(user_ids: list[str]) -> list[str]:
    user_ids = _unique(user_ids)
    for user_id in user_ids:
        if not _USER_ID.match(user_id):
            raise ValueError(f"not a Slack user id: {user_id!r}")
    return user_ids


def _check_roles(roles: list[str]) -> list[str]:
    roles = _unique(roles)
    for role in roles:
        if not _ROLE.match(role):
            raise ValueError(f"not a role name: {role!r}")
    return roles


def _check_pattern(pattern: str) -> str:
    pattern = pattern.strip()
    if pattern != "*" and not _RESOURCE.match(pattern):
        raise ValueError(
            f"resource must look like 'tool:name' or 'connection:name' (or '*'), got {pattern!r}"
        )
    return pattern


ResourcePattern = Annotated[str, AfterValidator(_check_pattern)]
UserIds = Annotated[list[str], AfterValidator(_check_user_ids)]
RoleNames = Annotated[list[str], AfterValidator(_check_roles)]


def pattern_matches(pattern: str, resource: str) -> bool:
    """Exact match, or a glob where only ``*`` is special (any run of characters)."""
    if "*" not in pattern:
        return pattern == resource
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, resource, flags=re.DOTALL) is not None


def _pattern_rank(pattern: str) -> tuple[int, int]:
    """Higher is more specific: exact beats glob, then more literal characters."""
    return (0 if "*" in pattern else 1, len(pattern.replace("*", "")))


class Condition(DeferredModel):
    """A threshold on one numeric field of the tool input, e.g. ``amount > 1000``.

    ``field`` may be a dotted path into nested objects (``"payment.amount"``). A missing field, or
    one that is not a number (strings, booleans, null), makes the condition not hold. A number that
    is not finite (``1e999`` parses to infinity; NaN) leaves it undecided: :func:`match_rule` then
    asks a person rather than skip the rule, since ``amount > 1000`` must not wave infinity through.
    """

    field: str = Field(min_length=1)
    op: ConditionOp
    value: float

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("condition value must be a finite number")
        return value

    def evaluate(self, tool_input: dict[str, Any] | None) -> bool | None:
        """True/False when the field can be compared; None when it is a non-finite number (undecided)."""
        found: Any = tool_input
        for part in self.field.split("."):
            if not isinstance(found, dict) or part not in found:
                return False
            found = found[part]
        if isinstance(found, bool) or not isinstance(found, int | float):
            return False
        if not math.isfinite(found):
            return None
        return _OPS[self.op](found, self.value)

    def holds(self, tool_input: dict[str, Any] | None) -> bool:
        return self.evaluate(tool_input) is True

    def describe(self) -> str:
        value = int(self.value) if self.value.is_integer() else self.value
        return f"{self.field} {self.op} {value}"


class ToolPolicy(DeferredModel):
    """Who may approve calls of one resource, and how many distinct people must."""

    resource: ResourcePattern
    approvers: UserIds = Field(default_factory=list)  # Slack user ids
    approver_groups: RoleNames = Field(default_factory=list)  # role names from TenantPolicy.roles
    required_approvals: int = Field(default=1, ge=1)
    updated_by: str | None = None  # principal id
    updated_at: datetime | None = None

    def same_list(self, other: ToolPolicy | None) -> bool:
        """Same people, groups and count (who edited it and when aside)."""
        return other is not None and (self.approvers, self.approver_groups, self.required_approvals) == (
            other.approvers,
            other.approver_groups,
            other.required_approvals,
        )


class Rule(DeferredModel):
    """Allow, deny or require approval for resources matching ``resource`` (exact or ``*`` glob).

    Applies only to people holding one of ``roles`` (when any are given) and only when ``condition``
    (when given) holds for the tool input.
    """

    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:10])
    resource: ResourcePattern
    effect: Effect
    roles: RoleNames = Field(default_factory=list)
    condition: Condition | None = None
    description: str = ""

    def matches_resource(self, resource: str) -> bool:
        return pattern_matches(self.resource, resource)

    def applies(self, tool_input: dict[str, Any] | None, user_roles: set[str]) -> bool | None:
        """True/False, or None when the roles match but the condition is undecided (non-finite number)."""
        if self.roles and not user_roles.intersection(self.roles):
            return False
        return True if self.condition is None else self.condition.evaluate(tool_input)

    def precedence(self) -> tuple[int, int, int, int]:
        """Sort key, highest first: pattern specificity, then qualifiers (roles, condition), then strictness."""
        qualifiers = int(bool(self.roles)) + int(self.condition is not None)
        return (*_pattern_rank(self.resource), qualifiers, _STRICTNESS[self.effect])


class TenantPolicy(DeferredModel):
    """One workspace's whole policy. ``version`` counts stored changes (0 = never edited)."""

    team_id: str
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=list)
    roles: dict[str, UserIds] = Field(default_factory=dict)
    allow_external: bool = False
    guest_channels: list[str] = Field(default_factory=list)  # where Slack Connect guests may talk to the agent
    version: int = 0

    @model_validator(mode="after")
    def _tools_keyed_by_resource(self) -> TenantPolicy:
        for resource, tool_policy in self.tools.items():
            if tool_policy.resource != resource:
                raise ValueError(f"tools[{resource!r}] describes {tool_policy.resource!r}")
        return self

    def tool_policy(self, resource: str) -> ToolPolicy | None:
        """The approver list for ``resource``: its own entry, else the most specific glob entry."""
        exact = self.tools.get(resource)
        if exact is not None:
            return exact
        globs = [p for key, p in self.tools.items() if "*" in key and pattern_matches(key, resource)]
        return max(globs, key=lambda p: _pattern_rank(p.resource), default=None)

    def roles_of(self, user_id: str) -> set[str]:
        return {role for role, members in self.roles.items() if user_id in members}

    def eligible_approvers(self, resource: str) -> set[str]:
        """Slack user ids who may approve ``resource``: listed approvers plus members of its groups."""
        tool_policy = self.tool_policy(resource)
        if tool_policy is None:
            return set()
        eligible = set(tool_policy.approvers)
        for group in tool_policy.approver_groups:
            eligible.update(self.roles.get(group, []))
        return eligible

    def rule_for(self, resource: str, tool_input: dict[str, Any] | None, user_roles: set[str]) -> Rule | None:
        """The rule that decides a call of ``resource`` (:func:`match_rule`), for the engine's policy source."""
        return match_rule(self, resource, tool_input, user_roles)


def match_rule(
    policy: TenantPolicy,
    resource: str,
    tool_input: dict[str, Any] | None,
    user_roles: set[str],
) -> Rule | None:
    """The rule that decides a call of ``resource`` by someone holding ``user_roles``, or None.

    Candidates are the rules whose pattern matches ``resource``, tried most specific first: exact
    patterns before globs, longer globs (more literal characters) before shorter ones; for the same
    pattern, rules with more qualifiers (roles, condition) first; then the stricter effect (deny,
    require_approval, allow); then the order they were added. The first that applies (roles
    intersect, condition holds) wins. So ``{tool:refund, allow}`` plus
    ``{tool:refund, require_approval, amount > 1000}`` asks only for large refunds.

    A rule whose condition is undecided (the field is infinite or NaN) is never skipped: a deny
    rule denies, otherwise the answer is "require_approval" (a person decides) unless the rules
    after it would deny anyway.
    """
    indexed = [(index, rule) for index, rule in enumerate(policy.rules) if rule.matches_resource(resource)]
    indexed.sort(key=lambda item: (tuple(-x for x in item[1].precedence()), item[0]))
    return _first_applying([rule for _, rule in indexed], tool_input, user_roles)


def _first_applying(rules: list[Rule], tool_input: dict[str, Any] | None, user_roles: set[str]) -> Rule | None:
    undecided: Rule | None = None  # the first rule whose condition could not be compared
    for rule in rules:
        applies = rule.applies(tool_input, user_roles)
        if applies is None and rule.effect != "deny":
            # the call lands here or on a later rule: keep looking for a deny, else a person decides
            undecided = undecided or rule
            continue
        if applies is not False:
            return rule if undecided is None or rule.effect == "deny" else _ask_instead(undecided)
    return _ask_instead(undecided) if undecided is not None else None


def _ask_instead(rule: Rule) -> Rule:
    assert rule.condition is not None
    return rule.model_copy(update={
        "effect": "require_approval",
        "description": f"{rule.condition.field} is not a finite number, so a person has to decide.",
    })


@dataclass
class _Change:
    """What one edit did: the value handed back to the caller and the audit's before/after."""

    result: Any
    change: str
    subject: str
    before: Any
    after: Any


def _dump(model: BaseModel | None) -> Any:
    return None if model is None else model.model_dump(mode="json")


class PolicyStore:
    """Read and edit workspace policies in Redis; every edit is versioned and audited atomically."""

    def __init__(self, redis: RedisClient, audit: AuditLog) -> None:
        self._redis = redis
        self._audit = audit
        self._locks: dict[str, asyncio.Lock] = {}

    @staticmethod
    def key(team_id: str) -> str:
        return workspace_key(team_id, "policy")

    async def get(self, team_id: str) -> TenantPolicy:
        """The workspace's policy; an empty one (nobody listed, no rules) if it was never edited."""
        doc, version = await self._redis.hmget(self.key(team_id), "doc", "version")
        if doc is None:
            return TenantPolicy(team_id=team_id)
        policy = TenantPolicy.model_validate_json(doc)
        return policy.model_copy(update={"version": int(version or 0)})

    async def approvers(self, team_id: str, resource: str) -> ToolPolicy | None:
        """The approver list for ``resource`` (exact entry, else the most specific glob entry)."""
        return (await self.get(team_id)).tool_policy(resource)

    async def set_approvers(
        self,
        team_id: str,
        resource: str,
        user_ids: list[str],
        *,
        actor: str,
        required: int | None = None,
        groups: list[str] | None = None,
    ) -> ToolPolicy:
        """Replace who may approve ``resource``. ``required`` (N distinct people) and ``groups`` keep
        their current values when None (new entries: 1 and none). Raises ``ValueError`` if nobody is
        listed or fewer eligible people exist than ``required``.
        """
        resource = _check_pattern(resource)
        user_ids = _check_user_ids(user_ids)
        if groups is not None:
            groups = _check_roles(groups)

        def change(policy: TenantPolicy) -> _Change:
            before = policy.tools.get(resource)
            new_groups = groups if groups is not None else (before.approver_groups if before else [])
            new_required = required if required is not None else (before.required_approvals if before else 1)
            if not user_ids and not new_groups:
                raise ValueError(f"{resource} needs at least one approver or group (use remove_approvers)")
            after = ToolPolicy(
                resource=resource,
                approvers=user_ids,
                approver_groups=new_groups,
                required_approvals=new_required,
                updated_by=actor,
                updated_at=datetime.now(UTC),
            )
            if after.same_list(before):
                return _Change(before, "set_approvers", resource, None, None)  # nothing to store
            policy.tools[resource] = after
            eligible = len(policy.eligible_approvers(resource))
            if after.required_approvals > eligible:
                raise ValueError(
                    f"{resource} needs {after.required_approvals} distinct approvers but only {eligible} are listed"
                )
            return _Change(after, "set_approvers", resource, _dump(before), _dump(after))

        return await self._update(team_id, actor, change)

    async def remove_approvers(self, team_id: str, resource: str, *, actor: str) -> bool:
        """Drop the approver list of ``resource`` (its calls fall back to the tool's own policy)."""

        def change(policy: TenantPolicy) -> _Change:
            before = policy.tools.pop(resource, None)
            return _Change(before is not None, "remove_approvers", resource, _dump(before), None)

        return await self._update(team_id, actor, change)

    async def add_rule(self, team_id: str, rule: Rule, *, actor: str) -> Rule:
        """Add ``rule``; one with the same id is replaced (an edit)."""

        def change(policy: TenantPolicy) -> _Change:
            before = next((r for r in policy.rules if r.id == rule.id), None)
            if before is None:
                policy.rules.append(rule)
            else:
                policy.rules[policy.rules.index(before)] = rule
            return _Change(rule, "add_rule", f"rule:{rule.id}", _dump(before), _dump(rule))

        return await self._update(team_id, actor, change)

    async def remove_rule(self, team_id: str, rule_id: str, *, actor: str) -> Rule | None:
        """Remove the rule with ``rule_id``; returns it, or None if there was none."""

        def change(policy: TenantPolicy) -> _Change:
            before = next((r for r in policy.rules if r.id == rule_id), None)
            if before is not None:
                policy.rules.remove(before)
            return _Change(before, "remove_rule", f"rule:{rule_id}", _dump(before), None)

        return await self._update(team_id, actor, change)

    async def set_roles(self, team_id: str, role: str, user_ids: list[str], *, actor: str) -> list[str]:
        """Replace the members of ``role`` (an empty list removes the role). Returns the members."""
        role = role.strip()
        if not _ROLE.match(role):
            raise ValueError(f"not a role name: {role!r}")
        user_ids = _check_user_ids(user_ids)

        def change(policy: TenantPolicy) -> _Change:
            before = policy.roles.get(role)
            if user_ids:
                policy.roles[role] = user_ids
            else:
                policy.roles.pop(role, None)
            return _Change(user_ids, "set_roles", f"role:{role}", before, user_ids or None)

        return await self._update(team_id, actor, change)

    async def set_allow_external(self, team_id: str, allowed: bool, *, actor: str) -> bool:
        """Whether people from other organisations (Slack Connect) may approve in this workspace."""

        def change(policy: TenantPolicy) -> _Change:
            before = policy.allow_external
            policy.allow_external = allowed
            return _Change(allowed, "set_allow_external", "allow_external", before, allowed)

        return await self._update(team_id, actor, change)

    async def set_guest_channel(self, team_id: str, channel_id: str, admitted: bool, *, actor: str) -> bool:
        """Whether Slack Connect guests may talk to the agent in ``channel_id`` (start and steer turns)."""

        def change(policy: TenantPolicy) -> _Change:
            before = channel_id in policy.guest_channels
            rest = [c for c in policy.guest_channels if c != channel_id]
            policy.guest_channels = [*rest, channel_id] if admitted else rest
            return _Change(admitted, "set_guest_channel", f"channel:{channel_id}", before, admitted)

        return await self._update(team_id, actor, change)

    async def record_refusal(
        self, team_id: str, actor: str, what: str, *, data: dict[str, Any] | None = None, kind: str = "policy.refused"
    ) -> AuditEntry:
        """Audit an edit that was refused (e.g. a non-admin trying to change approvers), or with ``kind``
        ``guest.refused`` a guest refused by the admission rule (``bot.engine.admission``)."""
        return await self._audit.append(
            team_id, kind, actor=actor, subject=what, data={"what": what, **(data or {})}
        )

    def _lock_for(self, team_id: str) -> asyncio.Lock:
        lock = self._locks.get(team_id)
        if lock is None:
            lock = self._locks[team_id] = asyncio.Lock()
        return lock

    async def _update(self, team_id: str, actor: str, change: Callable[[TenantPolicy], _Change]) -> Any:
        """Read → change → write-if-unchanged-since-read with its audit entry; retry on conflict.

        ``change`` mutates the policy it is given (a fresh copy each attempt) and may raise
        ``ValueError`` to refuse. An edit that changes nothing writes nothing and is not audited.
        """
        key = self.key(team_id)
        # Edits from this process queue up locally; the version check handles other replicas.
        async with self._lock_for(team_id):
            for _ in range(_MAX_UPDATE_ATTEMPTS):
                current = await self.get(team_id)
                edited = current.model_copy(deep=True)
                outcome = change(edited)
                if edited == current:
                    return outcome.result
                new_version = current.version + 1
                document = edited.model_dump_json(exclude={"version"})
                try:
                    await self._audit.append(
                        team_id,
                        "policy.change",
                        actor=actor,
                        subject=outcome.subject,
                        data={
                            "change": outcome.change,
                            "before": outcome.before,
                            "after": outcome.after,
                            "version": new_version,
                        },
                        guarded_write=GuardedWrite(key=key, expected_version=current.version, value=document),
                    )
                except VersionConflict:
                    continue
                return outcome.result
        raise PolicyUpdateConflict(
            f"the policy of {team_id} kept changing; gave up after {_MAX_UPDATE_ATTEMPTS}"
        )
