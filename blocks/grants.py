""""Approve & don't ask again": the card's control that offers a standing approval, the settled card's
line for one that was given, and the thread's note when a call runs under one."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import ContextBlock

from blocks import actions as ids
from blocks.elements import button, confirm_dialog, option, static_select
from blocks.limits import (
    BUTTON_TEXT,
    CONFIRM_BUTTON,
    CONFIRM_TEXT,
    CONFIRM_TITLE,
    CONTEXT_TEXT,
    OPTION_DESCRIPTION,
    OPTION_TEXT,
    mrkdwn,
    one_line,
    plain,
    truncate,
    truncate_mrkdwn,
)
from blocks.text import inline_code, mention, slack_date, tool_name_of, verbatim
from bot.protocol import Grant, GrantOffer, InputRequest

GRANT_PLACEHOLDER = "Approve & don’t ask again…"


def grant_label(offer: GrantOffer) -> str:
    """How a "don't ask again" scope is named on a card."""
    if offer.scope == "conversation":
        return "Approve, don’t ask again here"
    return f"Approve, don’t ask again for {offer.days} days"


def grant_description(offer: GrantOffer) -> str:
    if offer.scope == "conversation":
        return "Calls like it run without asking for the rest of this conversation"
    return f"The requester's calls like it run without asking, in any conversation, for {offer.days} days"


def _grant_scope_text(req: InputRequest, offer: GrantOffer) -> str:
    if offer.scope == "conversation":
        return "won't ask again in this conversation"
    return f"won't ask {mention(req.principal)} again for {offer.days} days, in any conversation"


def _grant_confirm(req: InputRequest, offer: GrantOffer | None) -> dict[str, Any]:
    tool = inline_code(one_line(tool_name_of(req)))
    scope = _grant_scope_text(req, offer) if offer else "stops asking in the scope you pick"
    return confirm_dialog(plain("Approve and stop asking?", CONFIRM_TITLE),
                          truncate_mrkdwn(f"{tool} runs now, and {scope}. The requester or an admin can revoke this "
                                          "in the app's Home tab.", CONFIRM_TEXT),
                          plain("Approve", CONFIRM_BUTTON), plain("Not yet", CONFIRM_BUTTON))


def grant_control(req: InputRequest) -> dict[str, Any]:
    """One scope: a button naming it. Several: a small menu, one option per scope. A Block Kit dict, as the
    rest of the card's controls (:mod:`blocks.controls`)."""
    action_id = ids.grant_action_id(req.request_id)
    if len(req.grants) == 1:
        [offer] = req.grants
        return button(plain(grant_label(offer), BUTTON_TEXT), action_id, offer.scope,
                      confirm=_grant_confirm(req, offer))
    options = [option(o.scope, plain(grant_label(o), OPTION_TEXT), truncate(grant_description(o), OPTION_DESCRIPTION))
               for o in req.grants]
    return static_select(action_id, GRANT_PLACEHOLDER, options, confirm=_grant_confirm(req, None))


def granted_text(req: InputRequest, scope: str | None) -> str | None:
    """The settled card's line for a "don't ask again" that was given."""
    offer = next((o for o in req.grants if o.scope == scope), None)
    if offer is None:
        return None
    if offer.scope == "conversation":
        return ":unlock: Won’t ask again in this conversation"
    return f":unlock: Won’t ask {mention(req.principal)} again for {offer.days} days"


def standing_note(grant: Grant) -> dict[str, Any]:
    """The thread's line for a call that runs without asking: whose standing approval let it, how far
    it reaches, and where it is revoked (a call that skips its card is never silent)."""
    whose = f"{mention(grant.granted_by)}’s standing approval" if grant.granted_by else "a standing approval"
    if grant.scope == "conversation":
        reach = "in this conversation"
    else:
        reach = f"for {mention(grant.requester)} in any conversation"
        reach += f" (until {slack_date(grant.expires_at)})" if grant.expires_at else ""
    text = (f":unlock: Ran without asking, under {whose} for {inline_code(one_line(grant.tool_name))} {reach}"
            " — revoke it in App Home to be asked again.")
    return {"text": text, "blocks": [ContextBlock(elements=[verbatim(mrkdwn(text, CONTEXT_TEXT))]).to_dict()]}
