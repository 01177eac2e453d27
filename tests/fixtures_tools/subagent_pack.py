"""A BOT_TOOLS module with a sub-agent: its tools are its own (private), the module's other tool is the main agent's."""

from __future__ import annotations

from bot.agents import SubAgent
from bot.approval import always
from bot.tools import tool


@tool(approval=always())
async def crm_lookup(args: dict) -> dict:
    """Look a customer up in the CRM."""
    return {}


@tool
async def summarise(args: dict) -> str:
    """Summarise something."""
    return ""


researcher = SubAgent(
    name="researcher",
    description="Looks customers up in the CRM.",
    instructions="You research customers.",
    tools=[crm_lookup, summarise],
)
