"""A support agent written with the OpenAI Agents SDK, as its docs write one, and the lines that put it in Slack.

    pip install '.[openai-agents]'
    BOT_AGENT=examples.openai_agents_agent:slack_agent make run

With no OPENAI_API_KEY in local mode the bot serves its offline demo model and the SDK's client talks to it
("look up acme", "refund ch_1001 $40"); with a key, the SDK talks to OpenAI (or OPENAI_BASE_URL).
"""

from agents import Agent, function_tool, set_default_openai_api

from bot import Approval, always, approvers
from bot.backends import wrap

# Chat Completions: what OpenAI, every OpenAI-compatible server and the offline demo model all speak
set_default_openai_api("chat_completions")


@function_tool(needs_approval=True)
def refund_charge(charge_id: str, amount: float) -> str:
    """Refund part or all of a charge to the customer's card.

    Args:
        charge_id: The charge to refund, e.g. ch_1001.
        amount: How much to refund, in USD.
    """
    return f"Refunded ${amount:,.2f} on {charge_id}."


@function_tool
def lookup_customer(name: str) -> str:
    """Look up a customer by name.

    Args:
        name: The customer's name.
    """
    return f"{name}: team plan, one open charge (ch_1001, $40.00)."


agent = Agent(
    name="Support",
    instructions="You help the support team with customers' charges. Look customers up before refunding.",
    model="gpt-4o-mini",
    tools=[refund_charge, lookup_customer],
)

# In Slack: the SDK already asks before refund_charge runs; ours says who may answer (finance's list).
slack_agent = wrap(agent, policies={
    "refund_charge": Approval(request=always(), response=approvers("tool:refund_charge")),
})
