"""A billing-support agent written in pydantic-ai, the way its docs write one, and the lines that put it in
Slack with this bot's approvals, questions and policies (docs/AGENTS.md, "pydantic-ai").

    pip install -e '.[pydantic-ai]'
    export OPENAI_API_KEY=sk-...            # the agent's own model (OPENAI_BASE_URL for another server)
    BOT_AGENT=examples.pydantic_ai_agent:slack_agent make run

The agent is unchanged: ``issue_refund`` needs approval (``requires_approval=True``), ``lookup_charge`` runs
at once, and ``ask_refund_reason`` asks the person a question (``CallDeferred``). In Slack the approval is a
card with Approve / Edit & approve / Cancel, the question a menu they may also answer by typing.
"""

from __future__ import annotations

from pydantic_ai import Agent, CallDeferred

agent = Agent(
    "openai-chat:gpt-4o-mini",  # Chat Completions, which OpenAI-compatible servers speak ("openai:" is the Responses API)
    instructions=(
        "You are a billing support agent. Look a charge up before refunding it, and ask why the customer "
        "wants a refund if nobody said. Amounts are in cents."
    ),
)

CHARGES = {
    "ch_1001": {"customer": "Initech", "amount_cents": 4000, "currency": "usd"},
    "ch_1002": {"customer": "Globex", "amount_cents": 12500, "currency": "usd"},
}


@agent.tool_plain
def lookup_charge(charge_id: str) -> dict[str, object]:
    """Look up a charge.

    Args:
        charge_id: the charge's id, like ch_1001
    """
    return CHARGES.get(charge_id, {"error": f"there is no charge {charge_id}"})


@agent.tool_plain(requires_approval=True)
def issue_refund(charge_id: str, amount_cents: int) -> str:
    """Refund all or part of a charge.

    Args:
        charge_id: the charge to refund
        amount_cents: how much to refund, in cents
    """
    return f"Refunded {amount_cents} cents on {charge_id}."


@agent.tool_plain
def ask_refund_reason(charge_id: str) -> str:
    """Ask the person why the customer wants this charge refunded."""
    raise CallDeferred(metadata={
        "question": f"Why does the customer want {charge_id} refunded?",
        "options": ["Charged twice", "Fraud", "Not happy with the service"],
    })


# --- in Slack: the agent above, with who may approve its refunds --------------------------------

from bot import Approval, always, approvers  # noqa: E402 - the example's two halves, kept apart on purpose
from bot.backends import wrap  # noqa: E402

slack_agent = wrap(agent, policies={
    # anyone on the "tool:issue_refund" approver list (App Home or /approvers) approves a refund
    "issue_refund": Approval(request=always(), response=approvers("tool:issue_refund")),
})
