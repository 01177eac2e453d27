"""The policy source without Slack: approver lists and workspace rules as the policy store keeps them.

:class:`StorePolicySource` is a ``bot.approval.PolicySource`` over any store that satisfies
:class:`PolicyRecords` (``store.policies.PolicyStore`` does, structurally): the engine never imports the store.
The terminal chat uses it as it is; a bot in Slack adds Slack's word on admins and outsiders
(``handlers.shared.governance.SlackPolicySource``). Errors propagate: the policy helpers fail closed.
"""

from __future__ import annotations

from typing import Any, Protocol

from bot.approval import Decision
from bot.governance import ApproverList


class StoredList(Protocol):
    """One resource's stored approver list (``store.policies.ToolPolicy``)."""

    @property
    def required_approvals(self) -> int: ...


class StoredRule(Protocol):
    """The stored rule that decides a call (``store.policies.Rule``)."""

    @property
    def effect(self) -> str: ...  # "allow", "deny" or "require_approval"
    @property
    def description(self) -> str: ...


class StoredPolicy(Protocol):
    """One workspace's stored policy (``store.policies.TenantPolicy``)."""

    @property
    def allow_external(self) -> bool: ...
    @property
    def guest_channels(self) -> list[str]: ...
    def tool_policy(self, resource: str) -> StoredList | None: ...
    def eligible_approvers(self, resource: str) -> set[str]: ...
    def roles_of(self, user_id: str) -> set[str]: ...
    def rule_for(
        self, resource: str, tool_input: dict[str, Any] | None, user_roles: set[str]
    ) -> StoredRule | None: ...


class PolicyRecords(Protocol):
    """What the policy source reads and audits in the policy store (``store.policies.PolicyStore``)."""

    async def get(self, team_id: str) -> StoredPolicy: ...
    async def record_refusal(
        self, team_id: str, actor: str, what: str, *, data: dict[str, Any] | None = None, kind: str = ...
    ) -> object: ...


class WorkspaceDirectory(Protocol):
    """Which org a workspace belongs to, as verified requests showed it (``store.installations``, OAuth mode)."""

    async def async_workspace(self, team_id: str) -> tuple[str | None, bool] | None: ...


class StorePolicySource:
    """``bot.approval.PolicySource`` over the policy store. Errors propagate: the helpers fail closed."""

    def __init__(self, policies: PolicyRecords, workspaces: WorkspaceDirectory | None = None) -> None:
        self.policies = policies
        self.workspaces = workspaces

    async def approver_list(self, team_id: str, resource: str) -> ApproverList | None:
        policy = await self.policies.get(team_id)
        listing = policy.tool_policy(resource)
        if listing is None:
            return None
        return ApproverList(
            approvers=sorted(policy.eligible_approvers(resource)),
            required_approvals=listing.required_approvals,
        )

    async def allows_external(self, team_id: str) -> bool:
        return (await self.policies.get(team_id)).allow_external

    async def outsiders(self, team_id: str, user_ids: list[str]) -> set[str]:
        """Without Slack nobody's organisation can be looked up: none are known (``SlackPolicySource`` asks Slack)."""
        return set()

    async def admits_guests(self, team_id: str, channel_id: str | None) -> bool:
        policy = await self.policies.get(team_id)
        return policy.allow_external or (channel_id is not None and channel_id in policy.guest_channels)

    async def workspace_org(self, team_id: str) -> str | None:
        """Known only where verified requests from that workspace were seen (the OAuth directory)."""
        seen = await self.workspaces.async_workspace(team_id) if self.workspaces is not None else None
        return seen[0] if seen else None

    async def guest_refused(self, team_id: str, principal_id: str, channel_id: str | None, via: str) -> None:
        await self.policies.record_refusal(
            team_id, principal_id, f"channel:{channel_id or '-'}", data={"via": via}, kind="guest.refused"
        )

    async def decide(
        self, team_id: str, resource: str, tool_input: dict[str, Any] | None, user_id: str | None
    ) -> Decision | None:
        policy = await self.policies.get(team_id)
        roles = policy.roles_of(user_id) if user_id else set()
        rule = policy.rule_for(resource, tool_input, roles)
        if rule is None:
            return None
        if rule.effect == "allow":
            return Decision(type="not-applicable")
        return Decision(type=_DECIDED[rule.effect], reason=rule.description or None)


_DECIDED = {"deny": "denied", "require_approval": "user-approval"}  # a stored rule's effect, as a decision
