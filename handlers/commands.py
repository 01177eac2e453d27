"""``/approvers``: see who approves each tool; admins edit the lists in a modal.

- ``/approvers`` — admins get the editor modal; everyone else gets the list (privately).
- ``/approvers list`` — the list, for everyone.
- ``/approvers edit`` — the editor for admins; a private refusal (and an audit entry) for others.
- ``/approvers help`` — usage.

Saving the modal (callback ``approvers_edit``) replaces every list shown in it at once; each change
is audited by the policy store. A non-admin submitting it (e.g. demoted while it was open) is refused
and nothing changes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncApp

from blocks.actions import APPROVERS_CALLBACK_ID, approvers_block_id, decode_approvers_submission
from blocks.approvers import approvers_list_text, approvers_modal
from handlers.identity import command_principal, interaction_principal

if TYPE_CHECKING:
    from handlers.governance import Governance

log = logging.getLogger(__name__)

COMMAND = "/approvers"
USAGE = (
    "*/approvers* — who may approve the agent's tool calls\n"
    "• `/approvers list` — show every tool's approvers\n"
    "• `/approvers edit` — change them (workspace admins)\n"
    "Admins can also edit the lists in the app's *Home* tab."
)
NO_TOOLS_NEXT = (
    "No tool of this agent asks for approval, so there is nothing to set up. Tools that ask "
    "(e.g. `@tool(approval=always())`) appear here once the bot loads them (`BOT_TOOLS`)."
)
ADMIN_NEXT = "Change them with `/approvers edit` or in the app's Home tab."
MEMBER_NEXT = "Only workspace admins can change who approves; ask one of them if a list is wrong."
UNSET_NEXT = "Tools marked _no approvers set_ can't be approved by anyone on their list yet."
REFUSED_EDIT = ":no_entry: Only workspace admins can change who approves. Nothing was changed. " \
               "See the current lists with `/approvers list`."


def register(app: AsyncApp, gov: Governance) -> None:
    async def on_command(ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
        await handle_command(gov, ack, body, client, respond)

    async def on_submit(ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        await handle_submission(gov, ack, body, view)

    app.command(COMMAND)(on_command)
    app.view(APPROVERS_CALLBACK_ID)(on_submit)


async def handle_command(gov: Governance, ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
    principal = command_principal(body)
    if principal is None or principal.team_id is None or principal.slack_user_id is None:
        await ack(text="I couldn't tell who you are; try again from Slack.")
        return
    team, user = principal.team_id, principal.slack_user_id
    words = (body.get("text") or "").strip().lower().split()
    sub = words[0] if words else ""
    if sub not in ("", "list", "edit"):
        await ack(text=USAGE)
        return
    is_admin = await gov.admins.is_admin(team, user)
    if sub == "edit" and not is_admin:
        await gov.refuse(team, principal, "approvers", via=COMMAND)
        await ack(text=REFUSED_EDIT)
        return
    if sub in ("", "edit") and is_admin:
        await ack()
        try:
            policies = await gov.tool_policies(team)
            await client.views_open(trigger_id=body.get("trigger_id"), view=approvers_modal(policies))
        except Exception:  # noqa: BLE001 - fall back to the list, privately, with the reason
            log.exception("could not open the approvers editor for %s in %s", user, team)
            await respond(text="The editor couldn't be opened just now; try again in a minute.\n"
                               + await list_text(gov, team, is_admin), response_type="ephemeral")
        return
    await ack(text=await list_text(gov, team, is_admin))


async def list_text(gov: Governance, team: str, is_admin: bool) -> str:
    try:
        policies = await gov.tool_policies(team)
    except Exception:  # noqa: BLE001 - say so rather than time out silently
        log.exception("approver lists of %s unreadable", team)
        return "Approver lists can't be read right now. Try again in a minute."
    if not policies:
        return NO_TOOLS_NEXT
    lines = [approvers_list_text(policies)]
    if any(not p.approvers for p in policies):
        lines.append(UNSET_NEXT)
    lines.append(ADMIN_NEXT if is_admin else MEMBER_NEXT)
    return "\n".join(lines)


async def handle_submission(gov: Governance, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
    principal = interaction_principal(body)
    values = (view.get("state") or {}).get("values") or {}
    submitted = decode_approvers_submission(values)
    first_block = next(iter(values), None)
    if principal is None or principal.team_id is None or principal.slack_user_id is None:
        await ack()
        return
    team, user = principal.team_id, principal.slack_user_id
    if not await gov.admins.is_admin(team, user):
        await gov.refuse(team, principal, "approvers", via="approvers_modal", tools=sorted(submitted))
        if first_block is not None:
            await ack(response_action="errors", errors={first_block: "Only workspace admins can change approvers."})
        else:
            await ack()
        return
    errors: dict[str, str] = {}
    for tool_name, users in submitted.items():
        problem = await gov.save_approvers(team, tool_name, users, principal)
        if problem:
            errors[approvers_block_id(tool_name)] = problem[:150]
    if errors:
        await ack(response_action="errors", errors=errors)
        return
    await ack()
    try:
        await gov.publish_home(team, user)
    except Exception:  # noqa: BLE001 - the lists are saved; a stale home tab refreshes when opened
        log.warning("could not republish the App Home of %s", user, exc_info=True)
