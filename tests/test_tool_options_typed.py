"""``@tool``'s options are typed keywords, one documented spelling: each flat option is a key of a
TypedDict that ``tool()`` and ``Tool`` unpack (editors complete it, type checkers check it), it says the
same as its group's field, and a misspelt one is refused naming the closest."""

from __future__ import annotations

import inspect
import re
from dataclasses import fields
from pathlib import Path
from typing import Unpack, get_args, get_type_hints

import pytest

import bot.tool_options as tool_options
import bot.tools as tools
from bot import Card, Deadlines, Execution, tool
from bot.connections.schema_tools import SchemaTool

ROOT = Path(__file__).resolve().parents[1]


def unpacked(fn) -> type:
    """The TypedDict a function's ``**kwargs: Unpack[...]`` names (fails if they are untyped)."""
    [kwargs] = [
        p for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD
    ]
    hint = get_type_hints(fn, include_extras=True)[kwargs.name]
    assert getattr(hint, "__origin__", None) is Unpack or repr(hint).startswith("typing.Unpack"), hint
    [typed] = get_args(hint)
    return typed


def test_tool_and_Tool_take_each_flat_option_as_a_typed_keyword_not_any():
    for fn in (tool, tools.Tool.__init__, SchemaTool.__init__):
        options = unpacked(fn)
        assert set(tool_options.GROUP_OF) <= set(options.__annotations__), fn
    assert set(unpacked(tool).__annotations__) == {*tool_options.GROUP_OF, *tool_options.OWN}


def test_each_flat_option_is_typed_as_its_groups_field():
    flat = get_type_hints(tool_options.Options)
    for group in (Card, Deadlines, Execution):
        grouped = get_type_hints(group)
        for f in fields(group):
            assert flat[f.name] == grouped[f.name], (
                f"{f.name}: {flat[f.name]} flat, {grouped[f.name]} grouped"
            )


def test_a_misspelt_option_is_refused_naming_the_closest():
    async def refund(charge_id: str) -> dict:
        return {}

    with pytest.raises(TypeError, match=r"no option 'expires_afer'; did you mean 'expires_after'\?"):
        tool(expires_afer=60)
    with pytest.raises(TypeError, match=r"did you mean 'approval'\?"):
        tool(refund, aproval=None)
    with pytest.raises(TypeError, match=r"did you mean 'editable'\?"):
        tools.Tool(refund, editabel=True)
    with pytest.raises(TypeError, match="the options are name, description"):
        tool(zzzz=1)


def test_flat_is_the_documented_spelling_and_the_grouped_one_is_named_once_as_accepted():
    page = (ROOT / "docs" / "TOOLS.md").read_text()
    grouped_uses = re.findall(r"(?:card=Card|deadlines=Deadlines|execution=Execution)\(", page)
    assert len(grouped_uses) <= 3, "the tools reference shows the grouped spelling beyond its one line"
    assert "accepted for compatibility" in page
    demo = (ROOT / "bot" / "demo_tools.py").read_text()
    assert (
        "card=Card(" not in demo and "deadlines=Deadlines(" not in demo and "execution=Execution(" not in demo
    )
