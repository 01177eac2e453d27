"""The public face: a tool author imports from ``bot`` only, and ``import bot`` stays cheap."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from pydantic import BaseModel

import bot

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ("tool", "ToolContext", "never", "once", "always", "auto", "approvers", "four_eyes", "n_of_m", "Approval",
          "Decision", "SubAgent", "WorkspaceError")


class Refund(BaseModel):
    amount: float


def python_blocks(page: str) -> list[str]:
    text = (ROOT / page).read_text()
    return [textwrap.dedent(block) for block in re.findall(r"^ *```python\n(.*?)^ *```", text, re.S | re.M)]


def readme_python_blocks() -> list[str]:
    return python_blocks("README.md")


def imported_modules(code: str) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom):
            modules.add(node.module or "")
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_the_docs_tool_examples_import_only_from_bot():
    for page in ("README.md", "docs/TOOLS.md"):
        blocks = [b for b in python_blocks(page) if "@tool" in b or "SubAgent(" in b]
        assert blocks, f"{page} shows no tool"
        for block in blocks:
            ours = {m for m in imported_modules(block) if m == "bot" or m.startswith("bot.")}
            assert ours <= {"bot"}, f"a tool example in {page} imports {sorted(ours - {'bot'})}:\n{block}"


def test_every_python_example_in_the_docs_is_valid_python():
    for page in ("README.md", "docs/TOOLS.md"):
        for block in python_blocks(page):
            compile(block, page, "exec")


def test_the_readmes_first_tool_file_runs_as_written():
    first = next(b for b in readme_python_blocks() if "@tool" in b and "import" in b)
    namespace: dict[str, object] = {}
    exec(compile(first, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    tools = [v for v in namespace.values() if type(v).__name__ == "Tool"]
    assert tools
    assert all(t.description for t in tools), "a README tool has no model-facing description"


def test_the_demo_tools_import_only_from_bot():
    ours = {m for m in imported_modules((ROOT / "bot" / "demo_tools.py").read_text()) if m.startswith("bot")}
    assert ours == {"bot"}


def test_the_public_names_come_from_bot():
    for name in PUBLIC:
        assert getattr(bot, name) is not None, name
        assert name in bot.__all__


def test_import_bot_loads_no_slack_library_and_no_http_client():
    probe = ("import sys, bot; from bot import tool, always, Approval; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'slack_sdk', 'slack_bolt', 'httpx', 'aiohttp'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_tool_options_come_in_groups_and_flat_keywords_still_work():
    from datetime import timedelta

    import pytest

    from bot import Card, Deadlines, Execution, always, tool

    async def refund(args: Refund) -> dict:
        """Refund."""
        return {}

    grouped = tool(approval=always(), card=Card(prompt="Refund {amount}?", editable=True),
                   deadlines=Deadlines(expires_after=timedelta(hours=1)), execution=Execution(idempotent=True))(refund)
    flat = tool(approval=always(), prompt="Refund {amount}?", editable=True, expires_after=3600, idempotent=True)(refund)
    for made in (grouped, flat):
        assert (made.prompt, made.editable, made.expires_after, made.idempotent) == (
            "Refund {amount}?", True, timedelta(hours=1), True)
    with pytest.raises(TypeError, match="promt"):
        tool(promt="Refund?")  # a misspelt option fails where it is written


def test_the_readmes_own_agent_lines_wrap_the_example_agent_as_written(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the example agent's own model client wants one
    block = next(b for b in readme_python_blocks() if "wrap(" in b)
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    wrapped = namespace["slack_agent"]
    assert type(wrapped).__name__ == "WrappedAgent"
    assert wrapped.backend.framework == "pydantic-ai"  # type: ignore[attr-defined]
    assert set(wrapped.policies) == {"refund_charge"}  # type: ignore[attr-defined]
