"""A billing-support agent written in pydantic-ai, the way its docs write one, and the lines that put it in
Slack with this bot's approvals, questions and policies (docs/AGENTS.md, "pydantic-ai").

    pip install -e '.[pydantic-ai]'
    export OPENAI_API_KEY=sk-...            # the agent's own model (OPENAI_BASE_URL for another server)
    BOT_AGENT=examples.pydantic_ai_agent:slack_agent make run

With no ``OPENAI_API_KEY`` in local mode, the bot's offline demo model answers it: try "look up acme",
"refund ch_1001 $40" and "ask me about lunch".

The agent is unchanged: ``refund_charge`` needs approval (``requires_approval=True``), ``lookup_customer``
runs at once, and ``ask_question`` asks the person (``CallDeferred``). In Slack the approval is a card with
Approve / Edit & approve / Cancel, the question a menu they may also answer by typing.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel
from pydantic_ai import Agent, CallDeferred

agent = Agent(
    "openai-chat:gpt-4o-mini",  # Chat Completions, which OpenAI-compatible servers speak ("openai:" is the Responses API)
    instructions=(
        "You are a billing support agent. Look the customer up before refunding a charge, and ask the "
        "person when you need to know something. Amounts are in dollars."
    ),
)

CUSTOMERS = {
    "acme": {"customer": "Acme Corp", "plan": "Business", "last_charge": {"id": "ch_1001", "amount": 420.0}},
    "globex": {"customer": "Globex", "plan": "Pro", "last_charge": {"id": "ch_2002", "amount": 49.0}},
}


@agent.tool_plain
def lookup_customer(name: str) -> dict[str, object]:
    """Look up a customer's plan and last charge. Read-only.

    Args:
        name: the customer's name, like Acme
    """
    return CUSTOMERS.get(name.strip().lower(), {"error": f"no customer named {name!r}"})


@agent.tool_plain(requires_approval=True)
def refund_charge(charge_id: str, amount: float, reason: str = "requested by customer") -> dict[str, object]:
    """Refund all or part of a charge.

    Args:
        charge_id: the charge to refund, like ch_1001
        amount: how much to refund, in dollars
        reason: why, in a few words
    """
    refund_id = "re_" + hashlib.sha1(f"{charge_id}:{amount}".encode()).hexdigest()[:10]
    return {"refund_id": refund_id, "charge_id": charge_id, "amount": amount, "status": "succeeded"}


class Choice(BaseModel):
    label: str


@agent.tool_plain
def ask_question(question: str, options: list[Choice]) -> str:
    """Ask the person a question, with choices they can pick from (they may also answer in their own words)."""
    raise CallDeferred(metadata={"question": question, "options": [option.label for option in options]})


# --- in Slack: the agent above, with who may approve its refunds --------------------------------

from bot import Approval, always, approvers  # noqa: E402 - the example's two halves, kept apart on purpose
from bot.backends import wrap  # noqa: E402

slack_agent = wrap(agent, policies={
    # anyone on the "tool:refund_charge" approver list (App Home or /approvers) approves a refund
    "refund_charge": Approval(request=always(), response=approvers("tool:refund_charge")),
})
