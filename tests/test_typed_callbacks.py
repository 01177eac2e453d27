"""Nothing is hung on a function or object as an ad-hoc attribute: the live text a model client may tell to
start over is a typed object (``RestartableText``), and the built-in ``delegate`` is told apart by a typed
flag on the Tool. A turn whose model stream broke mid-text shows only the retry's words."""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.agents import SubAgent
from bot.engine.tool_registry import ToolRegistry
from bot.models import OpenAIChatModel
from bot.models.base import RestartableText
from tests.engine.harness import make_runtime, say
from tests.engine.test_live_text import RecordingLive
from tests.engine.test_smoke import refund_charge
from tests.fakes import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-0123456789abcdef"


def hung_attributes(path: Path) -> list[str]:
    """``f.x = …`` where ``f`` is a function defined in the same scope, or any attribute set on a line
    that has to silence the type checker for it (``type: ignore[attr-defined]``)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []
    for scope in ast.walk(ast.parse(text)):
        body = getattr(scope, "body", None)
        if not isinstance(body, list):
            continue
        functions = {n.name for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        for node in ast.walk(scope):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if not isinstance(target, ast.Attribute) or not isinstance(target.value, ast.Name):
                    continue
                silenced = "attr-defined" in lines[node.lineno - 1]
                if target.value.id in functions or silenced:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(target)}")
    return found


def test_the_engine_hangs_no_attribute_on_a_function_or_an_object():
    found = sorted({hit for path in (ROOT / "bot").rglob("*.py") for hit in hung_attributes(path)})
    assert found == []


def test_the_builtin_delegate_is_told_apart_by_a_flag_on_its_tool():
    registry = ToolRegistry([refund_charge])
    assert refund_charge.delegates is False
    registry.register(
        SubAgent(
            name="billing", description="Billing questions.", instructions="Bill.", tools=[refund_charge]
        )
    )
    assert registry.get("delegate").delegates is True


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


async def test_a_turn_whose_stream_broke_mid_text_shows_only_the_retrys_words(redis, fake):
    fake.reply_truncated_stream("half an ans")
    fake.reply_text("a whole answer")
    model = OpenAIChatModel(
        "gpt-4o-mini", base_url=fake.base_url, api_key=KEY, timeout=2.0, backoff_base=0.01
    )
    live = RecordingLive()
    runtime, channel, _ = make_runtime(redis, model, [refund_charge], live=live)
    try:
        await say(runtime, "hello")
        await runtime.wait_idle()
    finally:
        await model.aclose()
    [completed] = channel.of("message.completed")
    texts = [text for _, _, text, _ in live.calls]
    assert completed.text == "a whole answer" and texts[-1] == "a whole answer"
    assert "half an ans" in texts and not any(
        "half an ansa" in t for t in texts
    )  # started over, not extended
    assert len(fake.requests) == 2


def test_a_callback_that_can_start_over_is_a_typed_object():
    class Shown(RestartableText):
        def __init__(self) -> None:
            self.text = ""

        async def __call__(self, delta: str) -> None:
            self.text += delta

        def restart(self) -> None:
            self.text = ""

    with pytest.raises(TypeError):
        RestartableText()  # type: ignore[abstract]
    assert isinstance(Shown(), RestartableText)
