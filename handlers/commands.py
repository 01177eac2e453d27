"""``/approvers``: see who approves each tool; admins edit the lists in a modal.

- ``/approvers`` — a modal: the editor for admins, the lists read-only for everyone else.
- ``/approvers list`` — the lists as a private message, for everyone.
- ``/approvers edit`` — the editor for admins; a refusal (and an audit entry) for others.
- ``/approvers help`` (or any other word) — usage.

Slack's answer never waits on Slack (Bolt answers when the listener returns): the command is
acknowledged at once, then a background task opens a "Loading…" modal with the command's trigger_id
(valid for 3 s, so that goes first), asks Slack whether the person is an admin, reads the lists and
updates the modal. When the modal cannot be opened the same content goes out as a private message
through the command's response_url; when that fails too, the failure is only logged.

Saving the modal (callback ``approvers_edit``) replaces every list shown in it at once; each change
is audited by the policy store. A non-admin submitting it (e.g. demoted while it was open) is refused
and nothing changes.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError

from blocks.actions import APPROVERS_CALLBACK_ID, approvers_block_id, decode_approvers_submission
from blocks.approvers import (
    approvers_list_modal,
    approvers_list_text,
    approvers_modal,
    loading_modal,
    notice_modal,
)
from blocks.home import ApproverListView, without_lists_text
from bot.principals import Principal, slack_user
from handlers.delivery.home import republish
from handlers.identity import command_principal, interaction_principal
from handlers.shared.governance import ADMIN_CHECK_FAILED, PEOPLE_CHECK_SECONDS, Governance
from store.client import StoreError
from store.policies import PolicyUpdateConflict

log = logging.getLogger(__name__)

COMMAND = "/approvers"
USAGE = (
    "*/approvers* — who may approve the agent's tool calls\n"
    "• `/approvers list` — show who approves each tool\n"
    "• `/approvers edit` — change them (workspace admins)\n"
    "• `/approvers guests on|off` — let Slack Connect guests in this channel ask the agent (workspace admins)\n"
    "• `/approvers revoke-tokens [@person]` — revoke your result tokens (admins: anyone's)\n"
    "Admins can also edit the lists in the app's *Home* tab."
)
NO_TOOLS_NEXT = (
    "No tool's rule reads an approver list, so there is nothing to set up here. A tool reads one with "
    "`approvers(\"tool:<name>\")`, `four_eyes(\"tool:<name>\")` or `n_of_m(2, \"tool:<name>\")` "
    "(`bot.governance`), once the bot loads it (`BOT_TOOLS`)."
)
ADMIN_NEXT = "Change them with `/approvers edit` or in the app's Home tab."
MEMBER_NEXT = "Only workspace admins can change who approves; ask one of them if a list is wrong."
UNSET_NEXT = "Lists marked _no approvers set_ let nobody approve the tools that read them yet."
UNCHECKED_NEXT = f"{ADMIN_CHECK_FAILED.removesuffix('.')} to edit the lists."
REFUSED_EDIT = ":no_entry: Only workspace admins can change who approves. Nothing was changed. " \
               "See the current lists with `/approvers list`."
UNCHECKED_EDIT = f":warning: {ADMIN_CHECK_FAILED} Nothing was changed."
GUESTS_ON = ("Slack Connect guests in <#{channel}> can now ask the agent; their requests follow the tools' "
             "rules like anyone's. `/approvers guests off` closes it again.")
GUESTS_OFF = "Slack Connect guests in <#{channel}> can no longer ask the agent."
REFUSED_REVOKE = ":no_entry: Only workspace admins can revoke someone else's result tokens. Nothing was changed."
REVOKED = ("Every result token given to <@{user}> until now is revoked: none of them settles anything any more. "
           "A new one comes from the card's *Get a result token*.")
UNREADABLE = "Approver lists can't be read right now. Try again in a minute."
EDITOR_FAILED = "The editor couldn't be opened just now; try again in a minute."
# A view_submission must carry its errors in the ack: the admin check may take this long of Slack's 3 s
# (saving the lists, a few Redis writes, needs the rest). A lookup cut short finishes in the background,
# so trying again moments later finds the answer in the cache.
SUBMIT_ADMIN_CHECK_SECONDS = 1.5
RESPOND_TIMEOUT_SECONDS = 10.0


def register(app: AsyncApp, gov: Governance) -> None:
    async def on_command(ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
        await handle_command(gov, ack, body, client, respond)

    async def on_submit(ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        await handle_submission(gov, ack, body, view)

    app.command(COMMAND)(on_command)
    app.view(APPROVERS_CALLBACK_ID)(on_submit)


@dataclass(frozen=True)
class Invocation:
    """One run of ``/approvers``: who ran it, the subcommand, and where to answer."""

    principal: Principal
    team: str
    user: str
    sub: str  # "", "list", "edit" or "guests"
    trigger_id: str | None
    client: Any
    respond: Any
    channel: str | None = None  # where it was run


async def handle_command(gov: Governance, ack: Any, body: dict[str, Any], client: Any, respond: Any) -> None:
    """Acknowledge at once (usage text in the ack); everything that asks Slack runs after it."""
    principal = command_principal(body)
    if principal is None or principal.team_id is None or principal.slack_user_id is None:
        await ack(text="I couldn't tell who you are; try again from Slack.")
        return
    words = (body.get("text") or "").strip().lower().split()
    sub = words[0] if words else ""
    guests = words[1:] if sub == "guests" else []
    whose = _whose_tokens((body.get("text") or "").split()[1:], principal.slack_user_id)
    if (sub not in ("", "list", "edit", "guests", "revoke-tokens")
            or (sub == "guests" and guests not in (["on"], ["off"])) or (sub == "revoke-tokens" and whose is None)):
        await ack(text=USAGE)
        return
    run = Invocation(principal=principal, team=principal.team_id, user=principal.slack_user_id, sub=sub,
                     trigger_id=body.get("trigger_id"), client=client, respond=respond,
                     channel=body.get("channel_id"))
    await ack()
    if sub == "guests":
        work = set_guests(gov, run, admitted=guests == ["on"])
    elif sub == "revoke-tokens":
        work = revoke_tokens(gov, run, whose or run.user)
    else:
        work = send_list(gov, run) if sub == "list" else show_modal(gov, run)
    gov.deps.tasks.spawn(work, what=f"{COMMAND} {sub or 'modal'} for {run.user}")


async def set_guests(gov: Governance, run: Invocation, *, admitted: bool) -> None:
    """``/approvers guests on|off``: an admin opens (or closes) the channel it was run in to Slack Connect
    guests talking to the agent. Anyone else is refused, and the refusal audited."""
    channel = run.channel
    if not channel:
        await reply(run, "Run `/approvers guests on` in the channel you want to open to guests.")
        return
    admin = await gov.admins.admin_status(run.team, run.user)
    if admin is not True:
        unsure = {"reason": "admin check failed"} if admin is None else {}
        await gov.refuse(run.team, run.principal, f"channel:{channel}", via=f"{COMMAND} guests", **unsure)
        await reply(run, REFUSED_EDIT if admin is False else UNCHECKED_EDIT)
        return
    try:
        await gov.policies.set_guest_channel(run.team, channel, admitted, actor=run.principal.principal_id)
    except (StoreError, PolicyUpdateConflict) as exc:
        log.warning("could not save the guest setting of %s in %s: %r", channel, run.team, exc)
        await reply(run, ":warning: The setting can't be saved right now. Try again in a minute.")
        return
    await reply(run, GUESTS_ON.format(channel=channel) if admitted else GUESTS_OFF.format(channel=channel))


def _whose_tokens(args: list[str], own: str) -> str | None:
    """``revoke-tokens``' person: yourself without one, else the one mentioned (``<@U123|name>``); None: neither."""
    if not args:
        return own
    mention = re.fullmatch(r"<@([A-Z0-9]+)(?:\|[^>]*)?>", args[0]) if len(args) == 1 else None
    return mention.group(1) if mention else None


async def revoke_tokens(gov: Governance, run: Invocation, user_id: str) -> None:
    """``/approvers revoke-tokens [@person]``: your own result tokens, or (workspace admins) anyone's: every
    token given to them until now settles nothing any more (``bot.engine.result_tokens``)."""
    revocations = gov.deps.token_revocations
    if revocations is None:
        await reply(run, "Result tokens are off here: there is nothing to revoke.")
        return
    if user_id != run.user:
        admin = await gov.admins.admin_status(run.team, run.user)
        if admin is not True:
            unsure = {"reason": "admin check failed"} if admin is None else {}
            await gov.refuse(run.team, run.principal, f"result-tokens:{user_id}", via=f"{COMMAND} revoke-tokens",
                             **unsure)
            await reply(run, REFUSED_REVOKE if admin is False else UNCHECKED_EDIT)
            return
    holder = slack_user(run.team, user_id).principal_id
    await revocations.revoke(holder, int(gov.deps.runtime.settings.clock() * 1000))
    await gov.audit.append(run.team, "result-tokens.revoked", actor=run.principal.principal_id, subject=holder,
                           data={"via": f"{COMMAND} revoke-tokens"})
    log.info("result tokens of %s revoked by %s", holder, run.principal.principal_id)
    await reply(run, REVOKED.format(user=user_id))


async def send_list(gov: Governance, run: Invocation) -> None:
    admin, policies = await asyncio.gather(
        gov.admins.admin_status(run.team, run.user), read_policies(gov, run.team)
    )
    await reply(run, list_text(gov, policies, admin))


async def show_modal(gov: Governance, run: Invocation) -> None:
    """Open "Loading…" first (the trigger lasts 3 s), decide meanwhile, then show the answer in it."""
    view_id, admin = await asyncio.gather(open_loading(run), gov.admins.admin_status(run.team, run.user))
    modal, text = await answer(gov, run, admin)
    if view_id is not None and await update_modal(run, view_id, modal):
        return
    await reply(run, text)


async def answer(gov: Governance, run: Invocation, admin: bool | None) -> tuple[dict, str]:
    """The modal to show, and the same as a private message for when no modal can be shown."""
    if run.sub == "edit" and admin is not True:
        unsure = {"reason": "admin check failed"} if admin is None else {}
        await gov.refuse(run.team, run.principal, "approvers", via=COMMAND, **unsure)
        text = REFUSED_EDIT if admin is False else UNCHECKED_EDIT
        return notice_modal(text), text
    policies = await read_policies(gov, run.team)
    if policies is None:
        return notice_modal(UNREADABLE), UNREADABLE
    text = list_text(gov, policies, admin)
    if admin:
        return approvers_modal(policies, unlisted(gov), empty_text=NO_TOOLS_NEXT), f"{EDITOR_FAILED}\n{text}"
    return approvers_list_modal(policies, footer(gov, policies, admin), empty_text=NO_TOOLS_NEXT), text


async def read_policies(gov: Governance, team: str) -> list[ApproverListView] | None:
    """Every tool's approver list, or None when the store can't be read."""
    try:
        return await gov.approver_lists(team)
    except Exception:  # noqa: BLE001 - say so rather than leave "Loading…" up
        log.exception("approver lists of %s unreadable", team)
        return None


def list_text(gov: Governance, policies: list[ApproverListView] | None, admin: bool | None) -> str:
    if policies is None:
        return UNREADABLE
    if not policies:
        return "\n".join([NO_TOOLS_NEXT, *unlisted(gov)])
    return "\n".join([approvers_list_text(policies), *footer(gov, policies, admin)])


def footer(gov: Governance, policies: list[ApproverListView], admin: bool | None) -> list[str]:
    lines = [UNSET_NEXT] if any(not p.approvers for p in policies) else []
    lines.extend(unlisted(gov))
    lines.append(ADMIN_NEXT if admin else UNCHECKED_NEXT if admin is None else MEMBER_NEXT)
    return lines


def unlisted(gov: Governance) -> list[str]:
    """A line naming the tools whose rule reads no list (and who decides instead), if any."""
    text = without_lists_text(gov.tools_without_lists())
    return [text] if text else []


async def open_loading(run: Invocation) -> str | None:
    """The "Loading…" modal's view id, or None when Slack would not open it (e.g. an expired trigger)."""
    try:
        response = await run.client.views_open(trigger_id=run.trigger_id, view=loading_modal())
        return (response.get("view") or {}).get("id")
    except Exception as exc:  # noqa: BLE001 - the answer goes out as a private message instead
        log.warning("could not open the %s modal for %s in %s: %s", COMMAND, run.user, run.team, _reason(exc))
        return None


async def update_modal(run: Invocation, view_id: str, modal: dict) -> bool:
    """Replace "Loading…" with ``modal``; False when the answer should go out as a message instead."""
    try:
        await run.client.views_update(view_id=view_id, view=modal)
        return True
    except Exception as exc:  # noqa: BLE001
        reason = _reason(exc)
        log.warning("could not update the %s modal of %s in %s: %s", COMMAND, run.user, run.team, reason)
        return reason == "not_found"  # they closed it before it loaded: leave them be


async def reply(run: Invocation, text: str) -> None:
    """A private message through the command's response_url; a failure is only logged."""
    try:
        sent = await asyncio.wait_for(run.respond(text=text, response_type="ephemeral"),
                                      RESPOND_TIMEOUT_SECONDS)
        if sent.status_code != 200:
            log.warning("response_url refused the %s reply for %s: %s %s", COMMAND, run.user,
                        sent.status_code, sent.body[:200])
    except Exception as exc:  # noqa: BLE001 - nowhere left to answer; Slack already has its ack
        log.warning("could not reply to %s for %s in %s: %r", COMMAND, run.user, run.team, exc)


def _reason(exc: Exception) -> str:
    if isinstance(exc, SlackApiError) and exc.response is not None:
        return str(exc.response.get("error"))
    return repr(exc)


async def handle_submission(gov: Governance, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
    """Save the editor's lists, answering with errors in the ack when something can't be saved.

    The ack must carry the errors, so the admin check happens before it: from the cache when fresh
    (it usually is: opening the editor checked), else one ``users.info`` given at most
    ``SUBMIT_ADMIN_CHECK_SECONDS``. When Slack can't tell in time we fail closed: an error under the
    first block, "Couldn't check your admin rights just now; try again", nothing saved, an audited
    refusal. The lookup carries on and fills the cache, so the next Save normally goes through.
    """
    principal = interaction_principal(body)
    values = (view.get("state") or {}).get("values") or {}
    submitted = decode_approvers_submission(values)
    first_block = next(iter(values), None)
    if principal is None or principal.team_id is None or principal.slack_user_id is None:
        await ack()
        return
    team, user = principal.team_id, principal.slack_user_id
    admin = await gov.admins.admin_status(team, user, within=SUBMIT_ADMIN_CHECK_SECONDS)
    if admin is not True:
        unsure = {"reason": "admin check failed"} if admin is None else {}
        await gov.refuse(team, principal, "approvers", via="approvers_modal", tools=sorted(submitted),
                         **unsure)
        message = "Only workspace admins can change approvers." if admin is False else ADMIN_CHECK_FAILED
        if first_block is not None:
            await ack(response_action="errors", errors={first_block: message})
        else:
            await ack()
        return
    errors: dict[str, str] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PEOPLE_CHECK_SECONDS  # one budget for all lists: the ack carries the errors
    listed = await gov.listed_before(team, [name for name, users in submitted.items() if not users])
    for name, users in submitted.items():
        problem = await gov.save_approvers(team, name, users, principal, within=deadline - loop.time())
        if problem:
            errors[approvers_block_id(name)] = problem[:150]
    if errors:
        await ack(response_action="errors", errors=errors)
        return
    emptied = [gov.empty_list_warning(name) for name in listed]
    if emptied:  # saved, and the editor's answer says what it means: nobody can approve those tools now
        await ack(response_action="update", view=notice_modal("\n".join(["Saved.", *emptied]),
                                                              block_id="approvers-saved-empty"))
    else:
        await ack()
    gov.deps.tasks.spawn(republish(gov, team, user), what=f"App Home of {user} after {COMMAND}")
