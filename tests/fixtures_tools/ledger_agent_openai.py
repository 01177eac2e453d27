"""The chaos proofs' ledger tools as an OpenAI Agents SDK agent (``BOT_AGENT=tests.fixtures_tools.ledger_agent_openai:
slack_agent``): the same effects on disk as ``chaos_tools``, keyed by the SDK's call id, and the same names, so
the ledger brain (tests/chaos/harness.py) drives it unchanged."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from agents.tool_context import ToolContext
from openai import AsyncOpenAI

from bot.backends import wrap
from bot.backends.openai_agents import OpenAIAgentsBackend
from tests.fixtures_tools.chaos_tools import _append, _append_once, _delay


def _line(key: str, ctx: ToolContext[Any]) -> str:
    return f"{key}\t{os.getpid()}\t{ctx.tool_call_id}\n"


@function_tool(needs_approval=True)
async def ledger_write(ctx: ToolContext[Any], key: str) -> str:
    """Write one line for this key to the ledger (needs approval; not safe to repeat)."""
    _append("CHAOS_STARTS", _line(key, ctx))
    await asyncio.sleep(_delay())
    _append("CHAOS_LEDGER", _line(key, ctx))
    return f"wrote {key}"


@function_tool(needs_approval=True)
async def ledger_write_idem(ctx: ToolContext[Any], key: str) -> str:
    """Write one line for this key to the ledger, at most once per call (safe to repeat)."""
    _append("CHAOS_STARTS", _line(key, ctx))
    await asyncio.sleep(_delay())
    await asyncio.to_thread(_append_once, _line(key, ctx), ctx.tool_call_id)
    return f"wrote {key}"


agent = Agent(name="ledger", instructions="Write what you are asked to the ledger.",
              tools=[ledger_write, ledger_write_idem],
              model=OpenAIChatCompletionsModel(model="ledger-brain", openai_client=AsyncOpenAI()))
slack_agent = wrap(OpenAIAgentsBackend(agent, idempotent={"ledger_write_idem"}))
