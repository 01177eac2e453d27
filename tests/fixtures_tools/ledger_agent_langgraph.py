"""The chaos ledger's two tools as a LangChain agent, for the LangGraph backend's chaos proofs (tests/chaos).

Loaded by the bot under test through ``BOT_AGENT=tests.fixtures_tools.ledger_agent_langgraph:agent``; its model
is the chaos ``LedgerBrain`` (``OPENAI_BASE_URL``). Both tools are reviewed by LangChain's human-in-the-loop
middleware; they leave the same traces as ``tests.fixtures_tools.chaos_tools`` (one line per execution
started, one ledger line per effect), keyed by the model's tool call id. ``ledger_write_idem`` is marked
idempotent and writes its effect at most once per call id.
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import ChatOpenAI

from tests.fixtures_tools.chaos_tools import _append, _append_once, _delay


def _line(key: str, call_id: str) -> str:
    return f"{key}\t{os.getpid()}\t{call_id}\n"


@tool
async def ledger_write(key: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Write one line for this key to the ledger (not safe to repeat)."""
    _append("CHAOS_STARTS", _line(key, call_id))
    await asyncio.sleep(_delay())
    _append("CHAOS_LEDGER", _line(key, call_id))
    return f"wrote {key}"


@tool
async def ledger_write_idem(key: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Write one line for this key to the ledger, at most once per call (safe to repeat)."""
    _append("CHAOS_STARTS", _line(key, call_id))
    await asyncio.sleep(_delay())
    await asyncio.to_thread(_append_once, _line(key, call_id), call_id)
    return f"wrote {key}"


ledger_write_idem.metadata = {"idempotent": True}

agent = create_agent(
    ChatOpenAI(model="ledger", max_retries=0),
    tools=[ledger_write, ledger_write_idem],
    middleware=[HumanInTheLoopMiddleware(interrupt_on={
        "ledger_write": {"allowed_decisions": ["approve", "reject"]},
        "ledger_write_idem": {"allowed_decisions": ["approve", "reject"]},
    })],
)
