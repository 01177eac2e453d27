"""A response policy in one file: any two people of an approver list, one of them a manager.

    @tool(approval=Approval(request=always(), response=two_with_a_manager("tool:big_refund")))

Two distinct approvals are needed from people on the tool's list or on the managers' list (``list:managers``
unless another is named), and one of them must be a manager's; the requester never counts. Both lists are
edited by admins in App Home or with ``/approvers`` like any other.

Everything the rest of the bot needs to know is said here, on the :class:`~bot.approval.Policy`: how it reads
in App Home (``label``), who may answer for the card (``responders``), the lists admins are offered
(``reads_lists``) and the approvals it needs (``required``). Nothing in handlers/ or blocks/ names it.
"""

from __future__ import annotations

from bot.approval import AnswerersContext, Decision, Policy, ResponseContext, rejected
from bot.governance import check_list, list_name, listed_responders
from bot.protocol import Responders

APPROVALS = 2
MANAGERS = "list:managers"


def two_with_a_manager(resource: str, managers: str = MANAGERS) -> Policy:
    """Any two people of ``resource``'s approver list or of ``managers``, at least one of them a manager."""

    async def rule(ctx: ResponseContext) -> Decision:
        requester, responder = ctx.request.principal, ctx.response.principal
        if ctx.response.decision == "cancel":  # the requester, or anyone on either list
            as_listed = await check_list(ctx, resource, required=None)
            return as_listed if as_listed.type == "allowed" else await check_list(ctx, managers, required=None)
        if requester is not None and requester.same_as(responder):
            return rejected(f"You can't approve your own request; {APPROVALS} other people must, one of them a manager.")
        as_manager = await check_list(ctx, managers, required=APPROVALS)
        if as_manager.type == "allowed":
            return as_manager
        as_listed = await check_list(ctx, resource, required=APPROVALS)
        if as_listed.type != "allowed":
            return rejected(f"Only people on `{list_name(resource)}` or `{list_name(managers)}` can approve this.")
        if ctx.approvals and not await _a_manager_approved(ctx, managers):
            return rejected(f"The other approval must come from a manager (on `{list_name(managers)}`).")
        return as_listed

    async def responders(ctx: AnswerersContext) -> Responders:
        listed = await listed_responders(ctx, resource, required=APPROVALS, exclude_requester=True)
        bosses = await listed_responders(ctx, managers, required=APPROVALS, exclude_requester=True)
        people = [*listed.people, *(p for p in bosses.people if not any(p.same_as(q) for q in listed.people))]
        if not bosses.people:
            return Responders(rule="nobody", description=f"No manager is set up on `{list_name(managers)}` yet",
                              required=APPROVALS)
        return Responders(rule="people", people=people, required=max(listed.required, bosses.required),
                          description="one of them a manager")

    return Policy(rule=rule, kind="two-with-a-manager", label=f"any {APPROVALS} on the list, one of them a manager",
                  responders=responders, reads_lists=(resource, managers), required=APPROVALS)


async def _a_manager_approved(ctx: ResponseContext, managers: str) -> bool:
    """Whether one of the approvals given so far is a manager's (fails closed: unknown is no)."""
    source, team = ctx.policies, ctx.session.team_id
    if source is None or team is None:
        return False
    try:
        listing = await source.approver_list(team, managers)
    except Exception:  # noqa: BLE001 - unreadable list: no manager is known to have approved
        return False
    on_it = set(listing.approvers) if listing else set()
    return any(p.rsplit(":", 1)[-1] in on_it for p in ctx.approvals)
