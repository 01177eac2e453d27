"""The chaos proofs' ledger tools written as a pydantic-ai agent, run by the bot under test through
``BOT_AGENT=tests.fixtures_tools.ledger_agent_pydantic_ai:agent`` (tests/chaos/test_kill9_frameworks.py).

Same ledger as ``chaos_tools`` (``CHAOS_LEDGER``, ``CHAOS_STARTS``, ``CHAOS_TOOL_DELAY``); both tools need
approval (``requires_approval=True``). ``ledger_write_idem`` is marked idempotent and keys its effect by
the model's tool call id, as a pydantic-ai tool author would, so it may be re-run after a crash.
"""

from __future__ import annotations

import asyncio
import os

from pydantic_ai import Agent, RunContext

from tests.fixtures_tools.chaos_tools import _append, _append_once, _delay

# the model is the chaos brain (OPENAI_BASE_URL), over Chat Completions
agent = Agent("openai-chat:chaos-brain", instructions="Write ledger lines when asked.")


def _line(key: str, ctx: RunContext[None]) -> str:
    return f"{key}\t{os.getpid()}\t{ctx.tool_call_id}\n"


@agent.tool(requires_approval=True)
async def ledger_write(ctx: RunContext[None], key: str) -> str:
    """Write one line for this key to the ledger (not safe to repeat)."""
    _append("CHAOS_STARTS", _line(key, ctx))
    await asyncio.sleep(_delay())
    _append("CHAOS_LEDGER", _line(key, ctx))
    return f"wrote {key}"


@agent.tool(requires_approval=True, metadata={"idempotent": True})
async def ledger_write_idem(ctx: RunContext[None], key: str) -> str:
    """Write one line for this key to the ledger, at most once per tool call (safe to repeat)."""
    _append("CHAOS_STARTS", _line(key, ctx))
    await asyncio.sleep(_delay())
    await asyncio.to_thread(_append_once, _line(key, ctx), str(ctx.tool_call_id))
    return f"wrote {key}"
