"""The demo tool pack (the default ``BOT_TOOLS``): one realistic tool per kind of policy.

- ``lookup_customer`` — read-only, runs without asking (``never()``)
- ``refund_charge``   — always asks; only the workspace's finance approvers may approve; they are told
  by direct message, reminded after 4 hours, and the request expires after a day
- ``deploy_service``  — always asks; four-eyes: someone other than the requester approves
- ``post_announcement`` — asks once per session (``once()``); the approver may also say "don't ask them
  again for 7 days"
- ``ask_question``    — built in: the agent asks you, you pick or type
- ``request_info``    — built in: the agent asks you to fill in a form (the fields are its choice)
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, Field

from bot import (
    Approval,
    ToolContext,
    WorkspaceError,
    always,
    approvers,
    four_eyes,
    money,
    never,
    once,
    tool,
)

CUSTOMERS = {
    "acme": {"customer": "Acme Corp", "plan": "Business", "seats": 42, "last_charge": {"id": "ch_1001", "amount": 420.0}},
    "globex": {"customer": "Globex", "plan": "Pro", "seats": 7, "last_charge": {"id": "ch_2002", "amount": 49.0}},
    "initech": {"customer": "Initech", "plan": "Starter", "seats": 3, "last_charge": {"id": "ch_3003", "amount": 12.0}},
}


class CustomerQuery(BaseModel):
    name: str = Field(description="Customer name, e.g. Acme")


@tool(approval=never(), example="Look up Acme")
async def lookup_customer(args: CustomerQuery, ctx: ToolContext) -> dict:
    """Look up a customer's plan, seats and last charge. Read-only."""
    found = CUSTOMERS.get(args.name.strip().lower())
    return found or {"error": f"no customer named {args.name!r}", "known": sorted(CUSTOMERS)}


class Refund(BaseModel):
    charge_id: str = Field(title="Charge ID", description="The charge to refund, e.g. ch_1001")
    amount: float = money("USD", gt=0, title="Amount", description="Amount in dollars")
    reason: str = Field(default="requested by customer", title="Reason", max_length=500)


@tool(approval=Approval(request=always(), response=approvers("tool:refund_charge")),
      prompt="Refund ${amount:,.2f} on {charge_id} ({reason})?", editable=True,
      denied_message="The refund was not approved. Tell the customer it is under review; do not retry.",
      example="Refund ch_1001 for $30, the customer was charged twice",
      remind_after=timedelta(hours=4), expires_after=timedelta(days=1))
async def refund_charge(args: Refund, ctx: ToolContext) -> dict:
    """Refund part or all of a charge. Needs a finance approver."""
    refund_id = "re_" + hashlib.sha1(ctx.idempotency_key.encode()).hexdigest()[:10]  # same id on any retry
    return {"refund_id": refund_id, "charge_id": args.charge_id, "amount": args.amount, "status": "succeeded"}


class Deploy(BaseModel):
    service: str = Field(description="Service name, e.g. api")
    environment: Literal["staging", "production"] = "production"
    version: str = Field(default="latest")


@tool(approval=Approval(request=always(), response=four_eyes()), dangerous=True, example="Deploy api to production")
async def deploy_service(args: Deploy, ctx: ToolContext) -> dict:
    """Deploy a service version to an environment. Someone other than the requester must approve."""
    approver = ctx.principal.principal_id if ctx.principal else "unknown"
    return {"deployed": args.service, "environment": args.environment, "version": args.version,
            "approved_by": approver}


class Announcement(BaseModel):
    channel: str = Field(default="#general")
    text: str = Field(min_length=1, max_length=2000)


@tool(approval=once(grant_days=7), example="Announce the maintenance window tonight at 10pm UTC")
async def post_announcement(args: Announcement, ctx: ToolContext) -> dict:
    """Post an announcement to a channel. Asks the first time in a conversation."""
    if ctx.workspace is None:
        return {"posted": False, "error": "There is no workspace to post in here."}
    try:
        posted = await ctx.workspace.post(args.channel, args.text)
    except WorkspaceError as exc:
        return {"posted": False, "channel": args.channel, "error": str(exc)}
    return {"posted": True, "channel": args.channel, "text": args.text, "link": posted.permalink}
