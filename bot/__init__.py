"""The public face for tool authors (DESIGN §6): everything a tools module needs, from one place.

    from bot import tool, ToolContext, always, Approval, approvers

The names are loaded when first used, so ``import bot`` stays cheap (no Slack library, no HTTP client):
the machinery lives in the submodules, which may change; these names are the contract.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# public name → the module that defines it
_WHERE = {
    # tools
    "tool": "bot.tools",
    "ToolContext": "bot.tools",
    "Card": "bot.tool_options",
    "Deadlines": "bot.tool_options",
    "Execution": "bot.tool_options",
    "money": "bot.tools",
    "SubAgent": "bot.agents",
    "WorkspaceError": "bot.ports",
    # request policies
    "never": "bot.approval",
    "once": "bot.approval",
    "always": "bot.approval",
    "auto": "bot.approval",
    "tenant_policy": "bot.governance",
    # response policies
    "approvers": "bot.governance",
    "four_eyes": "bot.governance",
    "n_of_m": "bot.governance",
    # a tool's approval, a policy of your own, and what policies decide
    "Approval": "bot.approval",
    "Policy": "bot.approval",
    "ApprovalContext": "bot.approval",
    "ResponseContext": "bot.approval",
    "Decision": "bot.approval",
    "allowed": "bot.approval",
    "rejected": "bot.approval",
    "Approved": "bot.approval",
    "Denied": "bot.approval",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:  # a submodule (``from bot import builtin``) is imported by Python itself after this
        raise AttributeError(f"module 'bot' has no attribute {name!r}")
    value = getattr(import_module(where), name)
    globals()[name] = value  # once: later lookups don't come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what type checkers and editors see (the names above, imported for them only)
    from bot.agents import SubAgent  # noqa: F401
    from bot.approval import (  # noqa: F401
        Approval,
        ApprovalContext,
        Approved,
        Decision,
        Denied,
        Policy,
        ResponseContext,
        allowed,
        always,
        auto,
        never,
        once,
        rejected,
    )
    from bot.governance import approvers, four_eyes, n_of_m, tenant_policy  # noqa: F401
    from bot.ports import WorkspaceError  # noqa: F401
    from bot.tool_options import Card, Deadlines, Execution  # noqa: F401
    from bot.tools import ToolContext, money, tool  # noqa: F401
