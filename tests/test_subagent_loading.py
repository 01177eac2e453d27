"""BOT_TOOLS modules define sub-agents beside tools: ``delegate`` appears, listing
them; a tool only sub-agents list is private to them; names stay unique."""

from __future__ import annotations

import pytest

from bot.agents import SubAgent
from bot.app import build_tools
from bot.config import Settings
from bot.engine.tool_registry import ToolRegistry
from bot.tools import tool
from tests.fixtures_tools import subagent_pack


def test_a_modules_sub_agents_are_registered_with_delegate_and_their_tools_stay_private():
    registry = build_tools(Settings(_env_file=None, BOT_TOOLS="tests.fixtures_tools.subagent_pack"))  # type: ignore[call-arg]
    assert registry.names() == ["ask_question", "delegate", "request_info"]
    assert registry.names("researcher") == ["crm_lookup", "summarise"]
    assert registry.get("crm_lookup") is subagent_pack.crm_lookup  # one registry: the settle path finds it
    assert not registry.offers("crm_lookup") and registry.offers("crm_lookup", "researcher")
    [delegate] = [s for s in registry.specs() if s.name == "delegate"]
    assert "- researcher: Looks customers up in the CRM." in delegate.description
    assert set(delegate.parameters["properties"]) == {"agent", "task"}


def test_a_tool_shared_with_the_main_agent_stays_the_main_agents_and_names_are_unique():
    registry = ToolRegistry([subagent_pack.summarise, subagent_pack.researcher])
    assert registry.names() == ["delegate", "summarise"]
    assert registry.names("researcher") == ["crm_lookup", "summarise"]

    @tool
    async def crm_lookup(args: dict) -> dict:
        """Another tool of the same name."""
        return {}

    with pytest.raises(ValueError, match="another tool is named 'crm_lookup'"):
        registry.register(SubAgent(name="other", description="x", instructions="y", tools=[crm_lookup]))


def test_without_sub_agents_there_is_no_delegate():
    assert "delegate" not in ToolRegistry([subagent_pack.summarise]).names()


def test_a_tool_of_yours_named_delegate_is_refused_beside_sub_agents():
    @tool
    async def delegate(args: dict) -> str:
        """Mine."""
        return ""

    with pytest.raises(ValueError, match="named 'delegate'"):
        ToolRegistry([delegate, subagent_pack.researcher])
