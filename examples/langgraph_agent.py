"""A LangChain agent (LangGraph underneath) with a refund that people approve, put in Slack.

The agent is written the way LangChain's docs write one: tools, a model, ``create_agent`` and the
human-in-the-loop middleware on the tool that needs a person. The last lines put it in Slack: our policies
decide who may approve (the approver list of refund_charge, kept in Slack with ``/approvers``).

    pip install '.[langgraph]'
    BOT_AGENT=examples.langgraph_agent:slack_agent make run

then, in the local workspace: "look up acme" (runs at once), "refund ch_1001 $40" (a card for its approvers).
With no ``OPENAI_API_KEY``, ``make run`` points ``ChatOpenAI`` at the offline demo model it serves.
"""

import os
import secrets

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


@tool
def refund_charge(charge_id: str, amount: float) -> dict:
    """Refund part or all of a card charge, in dollars."""
    return {"refund_id": f"re_{secrets.token_hex(4)}", "charge_id": charge_id, "amount": amount}


CUSTOMERS = {
    "acme": {"plan": "Pro", "seats": 40, "last_charge": {"id": "ch_1001", "amount": 480.0}},
    "globex": {"plan": "Team", "seats": 12, "last_charge": {"id": "ch_2002", "amount": 144.0}},
}


@tool
def lookup_customer(name: str) -> dict:
    """Look up a customer by name: their plan, seats and last charge."""
    found = CUSTOMERS.get(name.lower())
    if found is None:
        return {"error": f"no customer named {name}", "known": sorted(CUSTOMERS)}
    return {"customer": name.title(), **found}


agent = create_agent(
    model=ChatOpenAI(model=os.environ.get("MODEL", "gpt-4o-mini")),
    tools=[refund_charge, lookup_customer],
    middleware=[HumanInTheLoopMiddleware(interrupt_on={
        "refund_charge": {"allowed_decisions": ["approve", "edit", "reject"]},
    })],
    system_prompt="You help the support team look up customers and refund charges.",
)


# --- the lines that put it in Slack ----------------------------------------------------------------

from bot import Approval, always, approvers  # noqa: E402 - kept apart: the agent above needs none of it
from bot.backends import wrap  # noqa: E402

slack_agent = wrap(agent, policies={
    "refund_charge": Approval(request=always(), response=approvers("tool:refund_charge")),
})
