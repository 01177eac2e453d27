"""BOT_AGENT: a team's own agent named by a setting; every mistake stops the bot with the fix named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.assembly import load_agent, load_tools, with_agent_tools
from bot.config import ConfigError, Settings

ROOT = Path(__file__).resolve().parents[1]


def agent_setting(value: str) -> Settings:
    return Settings(_env_file=None, BOT_AGENT=value)  # type: ignore[call-arg]


def test_no_setting_means_the_built_in_loop():
    assert load_agent(Settings(_env_file=None)) is None  # type: ignore[call-arg]


@pytest.mark.parametrize(("value", "said"), [
    ("examples.pydantic_ai_agent", "module:attribute"),
    ("examples.no_such_module:agent", "check the module path"),
    ("examples.pydantic_ai_agent:no_such_agent", "has no 'no_such_agent'"),
    ("bot.config:Settings", "is not an agent this bot can drive"),
])
def test_a_wrong_setting_says_what_is_wrong(value, said, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ConfigError, match="BOT_AGENT") as raised:
        load_agent(agent_setting(value))
    assert said in str(raised.value)


def test_an_agent_module_that_fails_to_build_its_agent_is_said_plainly(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delitem(sys.modules, "examples.pydantic_ai_agent", raising=False)  # imported afresh
    with pytest.raises(ConfigError, match="importing examples.pydantic_ai_agent failed: UserError"):
        load_agent(agent_setting("examples.pydantic_ai_agent:slack_agent"))


def test_without_the_framework_s_extra_the_bot_exits_naming_the_command_that_installs_it(tmp_path):
    # pydantic-ai as if it were not installed: its import fails the way a missing package's does
    runs_bot = ("import sys, runpy; sys.modules['pydantic_ai'] = None; sys.argv = ['bot', 'run']; "
                "runpy.run_module('bot', run_name='__main__')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_", "REDIS_"))}
    env.update(BOT_AGENT="examples.pydantic_ai_agent:slack_agent", BOT_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT), PORT="0", LOCALSLACK_PORT="0")
    ran = subprocess.run([sys.executable, "-c", runs_bot], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "pip install '.[pydantic-ai]'" in ran.stderr + ran.stdout
    assert "Traceback" not in ran.stderr


def test_a_loop_setting_that_is_no_loop_stops_the_bot_naming_the_choices(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_", "REDIS_"))}
    env.update(BOT_LOOP="fast", BOT_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT), PORT="0",
               LOCALSLACK_PORT="0")
    ran = subprocess.run([sys.executable, "-m", "bot", "run"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "BOT_LOOP: 'fast' is not a loop: use native (the default) or builtin" in ran.stderr + ran.stdout
    assert "Traceback" not in ran.stderr


def test_the_loop_setting_reads_as_people_write_it():
    assert Settings(_env_file=None).loop == "native"  # type: ignore[call-arg]
    assert Settings(_env_file=None, BOT_LOOP=" Builtin ").loop == "builtin"  # type: ignore[call-arg]


def test_with_an_agent_the_demo_tools_stay_out_unless_bot_tools_names_them(monkeypatch):
    """Left unset, BOT_TOOLS' demo tools serve the bot's own loop: the example agents have tools of the same names
    (``refund_charge``, ``lookup_customer``), and the agent's are the ones its model calls. Named on purpose, a
    clash stops the bot naming both tools."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the example builds its OpenAI client on import
    with_example = agent_setting("examples.pydantic_ai_agent:slack_agent")
    registry = with_agent_tools(load_tools(with_example), load_agent(with_example))
    assert registry.get("post_announcement") is None  # a demo tool the example lacks
    assert registry.get("refund_charge") is not None and registry.get("refund_charge").fn.__module__ == "BOT_AGENT"
    named = Settings(_env_file=None, BOT_AGENT="examples.pydantic_ai_agent:slack_agent",  # type: ignore[call-arg]
                     BOT_TOOLS="bot.demo_tools")
    with pytest.raises(ConfigError, match=r"bot.demo_tools.lookup_customer and BOT_AGENT.lookup_customer "
                                          r"\(the agent's tool\)"):
        with_agent_tools(load_tools(named), load_agent(named))


def test_an_agent_on_the_demo_model_with_port_0_stops_the_bot_naming_port(tmp_path):
    """With no model key the agent's own client is pointed at the offline demo model on the bot's port, when the
    agent is imported, before the bot binds: with PORT=0 that address cannot be known, so the bot says so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_", "REDIS_"))}
    env.update(BOT_AGENT="examples.pydantic_ai_agent:slack_agent", BOT_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT), PORT="0", LOCALSLACK_PORT="0")
    ran = subprocess.run([sys.executable, "-m", "bot", "run"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "set PORT to a port of its own" in ran.stderr + ran.stdout
    assert "Traceback" not in ran.stderr
