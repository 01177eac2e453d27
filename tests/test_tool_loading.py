"""BOT_TOOLS: every module-level Tool is registered, built-ins stay, bad modules are named."""

from __future__ import annotations

import pytest

from bot.app import build_tools
from bot.config import ConfigError, Settings


def settings(tools: str) -> Settings:
    return Settings(_env_file=None, BOT_TOOLS=tools)  # type: ignore[call-arg]


def test_every_module_level_tool_is_registered_and_builtins_stay():
    registry = build_tools(settings("tests.fixtures_tools.pack"))
    assert registry.names() == ["ask_question", "echo", "request_info", "wipe_disk"]
    spec = {s.name: s for s in registry.specs()}
    assert spec["echo"].description == "Say it back."
    assert spec["echo"].parameters["properties"]["text"]["type"] == "string"
    assert registry.get("wipe_disk").policy_kind == "always"
    assert registry.get("echo").policy_kind == "never"


def test_several_modules_and_the_default_demo_pack():
    registry = build_tools(settings("bot.demo_tools, tests.fixtures_tools.pack"))
    assert {"refund_charge", "deploy_service", "lookup_customer", "post_announcement", "echo"} <= set(
        registry.names()
    )


def test_a_module_that_cannot_be_imported_names_the_setting():
    with pytest.raises(ConfigError, match="BOT_TOOLS.*no.such.module"):
        build_tools(settings("no.such.module"))


def test_two_tools_of_one_name_stop_the_bot_naming_both_modules():
    # the second would have replaced the first: calls the model makes to "echo" would run other code,
    # under the other tool's approval policy
    with pytest.raises(ConfigError, match=r"echo.*tests\.fixtures_tools\.pack.*tests\.fixtures_tools\.shadow"):
        build_tools(settings("tests.fixtures_tools.pack, tests.fixtures_tools.shadow"))


def test_a_tool_named_like_a_built_in_stops_the_bot():
    with pytest.raises(ConfigError, match=r"ask_question.*built-in"):
        build_tools(settings("tests.fixtures_tools.shadow_builtin"))


def test_a_module_listed_twice_registers_its_tools_once():
    registry = build_tools(settings("tests.fixtures_tools.pack, tests.fixtures_tools.pack"))
    assert registry.names() == ["ask_question", "echo", "request_info", "wipe_disk"]
