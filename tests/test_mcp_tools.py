"""MCP servers' tools as agent tools, against real MCP servers written with the SDK
(tests/fixtures_tools/mcp_server.py), over stdio and over streamable HTTP: listed and callable under
the configured policies, a changed list picked up, elicitation as a form card, a server that is down,
hangs or dies said plainly to the model while the bot serves on, and config errors that name the fix."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.connections.mcp import START_WAIT_S, McpConfigError, McpServers, load_config, tool_name
from bot.engine.turns import Runtime
from bot.models.scripted import ScriptedModel, call, calls
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from tests.engine.harness import ALICE, approve, make_runtime, say, shown, tool_results

SERVER = Path(__file__).parent / "fixtures_tools" / "mcp_server.py"


def runs(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def write_config(tmp_path: Path, servers: dict[str, Any], **top: Any) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers, **top}))
    return str(path)


def stdio_server(runs_file: Path, **extra: Any) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": [str(SERVER), "stdio"],
        "env": {"MCP_RUNS_FILE": str(runs_file)},
        **extra,
    }


@asynccontextmanager
async def connected(config_path: str, runtime: Runtime) -> AsyncIterator[McpServers]:
    servers = McpServers(load_config(config_path), runtime.tools)
    await servers.start()
    try:
        yield servers
    finally:
        await servers.close()


async def eventually(check: Any, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- stdio -----------------------------------------------------------------------------------------


async def test_stdio_tools_are_listed_and_run_under_the_configured_policies(redis, tmp_path):
    ran = tmp_path / "runs"
    config = write_config(
        tmp_path, {"crm": stdio_server(ran, approval="never")}, policies={"*delete*": "always"}
    )
    model = ScriptedModel(
        [
            call("crm__lookup_customer", call_id="l1", customer_id="c1"),
            call("crm__delete_customer", call_id="d1", customer_id="c1"),
            model_say("done"),
        ]
    )
    runtime, channel, store = make_runtime(redis, model, [])
    async with connected(config, runtime):
        spec = {s.name: s for s in runtime.tools.specs()}
        assert {"crm__lookup_customer", "crm__delete_customer", "crm__ship_order"} <= set(spec)
        # the server's inputSchema
        assert spec["crm__lookup_customer"].parameters["required"] == ["customer_id"]
        assert "Look up a customer by id." in spec["crm__lookup_customer"].description

        await say(runtime, "look up c1, then delete it")
        assert "customer c1: Acme Corp" in tool_results(shown(model))["l1"]  # "never": ran without a card
        [card] = channel.requests()
        assert card.kind == "tool-approval" and card.action.tool_name == "crm__delete_customer"
        assert runs(ran) == []  # "always" (a pattern of the file): nothing ran before the approval

        await approve(runtime, card.request_id)
        await approve(runtime, card.request_id)  # a second click changes nothing
        assert runs(ran) == ["deleted c1"]  # exactly once
        assert "deleted c1" in tool_results(shown(model))["d1"]


async def test_an_elicitation_becomes_a_form_card_and_its_answer_reaches_the_server(redis, tmp_path):
    ran = tmp_path / "runs"
    config = write_config(tmp_path, {"crm": stdio_server(ran, approval="never")})
    model = ScriptedModel(
        [
            call("crm__ship_order", call_id="s1", order="o42"),
            model_say("shipped"),
            call("crm__nested_form", call_id="n1"),
            model_say("hm"),
        ]
    )
    runtime, channel, _ = make_runtime(redis, model, [])
    async with connected(config, runtime):
        await say(runtime, "ship o42")
        [form] = channel.requests()
        assert form.kind == "user-input" and form.display == "form"
        assert form.prompt == "Where should order o42 go?"
        assert list(form.form["properties"]) == ["address", "boxes"]
        assert runs(ran) == []  # the server heard "cancel" the first time, and did nothing

        bad = await runtime.answer(
            InputResponse(request_id=form.request_id, values={"address": "x", "boxes": 0}, principal=ALICE)
        )
        # the server's own limits, checked on the form
        assert bad.state == "invalid" and "address" in bad.reason
        done = await runtime.answer(
            InputResponse(
                request_id=form.request_id, values={"address": "1 Main St", "boxes": 3}, principal=ALICE
            )
        )
        assert done.state == "settled"
        await runtime.wait_idle()
        assert runs(ran) == ["shipped o42 to 1 Main St x3"]
        [first, again] = runs(Path(f"{ran}.keys"))  # called again after the form, with the same key
        assert first == again and first.endswith(":s1")
        assert "shipped o42 to 1 Main St in 3 boxes" in tool_results(shown(model))["s1"]

        # a form no Slack input can show: the server is declined, the model told why; nothing parks
        await say(runtime, "and the other one")
        result = tool_results(shown(model))["n1"]
        assert "asked for a form the bot cannot show" in result and "'where'" in result
        assert len(channel.requests()) == 1


async def test_a_changed_tool_list_reaches_the_model_without_a_restart(redis, tmp_path):
    config = write_config(tmp_path, {"crm": stdio_server(tmp_path / "runs", approval="never")})
    model = ScriptedModel(
        [
            call("crm__add_report_tool"),
            model_say("added"),
            call("crm__monthly_report", call_id="r1", month="May"),
            model_say("ok"),
        ]
    )
    runtime, _, _ = make_runtime(redis, model, [])
    async with connected(config, runtime):
        assert runtime.tools.get("crm__monthly_report") is None
        await say(runtime, "add the report tool")
        await eventually(lambda: runtime.tools.get("crm__monthly_report") is not None)
        await say(runtime, "the May report")
        assert "crm__monthly_report" in [t.name for t in model.requests[-2][1]]  # offered to the model
        assert "report for May: all good" in tool_results(shown(model))["r1"]


async def test_a_server_that_is_down_hangs_or_dies_is_a_clear_tool_error_and_the_bot_serves_on(
    redis, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="bot.connections.mcp")
    config = write_config(
        tmp_path,
        {
            "crm": stdio_server(tmp_path / "runs", approval="never", timeout=1),
            "billing": {
                "url": f"http://127.0.0.1:{free_port()}/mcp",
                "headers": {"Authorization": "Bearer s3cret-token"},
            },
        },
    )
    model = ScriptedModel(
        [
            calls(("crm__slow", {"seconds": 5}, "h1"), ("crm__slow", {"seconds": 5}, "h2")),  # at once
            model_say("slow"),
            call("crm__lookup_customer", call_id="l1", customer_id="c7"),
            model_say("ok"),
            call("crm__crash", call_id="c1"),
            model_say("crashed"),
            call("crm__lookup_customer", call_id="l2", customer_id="c8"),
            model_say("ok"),
        ]
    )
    runtime, _, _ = make_runtime(redis, model, [])
    started = time.monotonic()
    async with connected(config, runtime) as servers:
        assert time.monotonic() - started < START_WAIT_S  # the billing server being down held nothing up
        [down] = [r.getMessage() for r in caplog.records if "'billing'" in r.getMessage()]
        assert "unavailable (connection refused)" in down and "s3cret" not in caplog.text
        assert not [n for n in runtime.tools.names() if n.startswith("billing__")]

        await say(runtime, "slow please")
        # calls to one server take turns, within the one timeout: the second said busy or silent (a race)
        for slow in (tool_results(shown(model))[c] for c in ("h1", "h2")):
            assert re.search(
                r"MCP server 'crm' (did not answer within|was busy with other calls for) 1 s", slow
            )
        await say(runtime, "look up c7")  # the next call is served
        assert "customer c7" in tool_results(shown(model))["l1"]

        await say(runtime, "crash it")
        assert "MCP server 'crm' closed the connection" in tool_results(shown(model))["c1"]
        await eventually(lambda: servers.servers["crm"].connected)  # a fresh process, the same tools
        await say(runtime, "look up c8")
        assert "customer c8" in tool_results(shown(model))["l2"]


# --- configuration -----------------------------------------------------------------------------------


def test_tool_names_fit_openai_and_stay_apart():
    assert tool_name("github", "create_issue") == "github__create_issue"
    dotted, underscored = tool_name("fs", "files.read"), tool_name("fs", "files_read")
    assert dotted != underscored and dotted.startswith("fs__files_read_") and underscored == "fs__files_read"
    long = tool_name("server", "x" * 120)
    assert len(long) == 64 and long == tool_name("server", "x" * 120)  # stable across restarts


def test_policies_patterns_first_then_the_servers_default_then_always(tmp_path, monkeypatch):
    config = load_config(
        write_config(
            tmp_path,
            {
                "github": {
                    "url": "https://example.com/mcp",
                    "approval": "never",
                    "policies": {"create_*": "once"},
                },
                "files": {"command": "files-server"},
            },
            policies={"github.*delete*": "always", "*.read_*": "never"},
        )
    )
    assert config.policy_name("github", "create_issue") == "once"  # the server's pattern
    assert config.policy_name("github", "delete_repo") == "always"  # the file's pattern
    assert config.policy_name("github", "get_issue") == "never"  # the server's default
    assert config.policy_name("files", "read_file") == "never"
    assert config.policy_name("files", "write_file") == "always"  # nothing said: always()


@pytest.mark.parametrize(
    ("servers", "says"),
    [
        (
            {"gh": {"url": "https://x/mcp", "headers": {"Authorization": "Bearer ${NO_SUCH_TOKEN_VAR}"}}},
            "mcpServers.gh.headers.Authorization uses ${NO_SUCH_TOKEN_VAR}, but NO_SUCH_TOKEN_VAR is not set",
        ),
        (
            {"gh": {"url": "https://x/mcp", "polices": {}}},
            "mcpServers.gh.polices: Extra inputs are not permitted",
        ),
        ({"gh": {"url": "https://x/mcp", "approval": "sometimes"}}, "mcpServers.gh.approval"),
        ({"gh": {"command": "x", "url": "https://x/mcp"}}, "either command"),
        ({"g h": {"command": "x"}}, "server name 'g h'"),
    ],
)
def test_a_bad_config_names_the_server_and_the_field_or_variable(tmp_path, servers, says):
    with pytest.raises(McpConfigError, match="BOT_MCP_CONFIG") as err:
        load_config(write_config(tmp_path, servers))
    assert says in str(err.value)


def test_a_bad_bot_mcp_config_stops_the_bot_with_one_line_naming_it(redis_url, tmp_path):
    from tests.test_cli import run

    config = write_config(
        tmp_path, {"gh": {"url": "https://x/mcp", "headers": {"X-Key": "${NO_SUCH_KEY_VAR}"}}}
    )
    result = run(["check"], {"BOT_MCP_CONFIG": config, "REDIS_URL": redis_url})
    assert result.returncode == 2 and "NO_SUCH_KEY_VAR" in result.stderr and "Traceback" not in result.stderr


def test_check_connects_to_each_server_and_says_what_it_offers_or_why_not(redis_url, tmp_path):
    from tests.test_cli import run

    config = write_config(tmp_path, {
        "files": stdio_server(tmp_path / "runs.txt"),
        "down": {"url": f"http://127.0.0.1:{free_port()}/mcp"},  # nothing listens there
    })
    result = run(["check"], {"BOT_MCP_CONFIG": config, "REDIS_URL": redis_url})
    assert result.returncode == 1, result.stdout + result.stderr  # something is wrong: a server is down
    [files] = [line for line in result.stdout.splitlines() if line.startswith("mcp: files:")]
    assert "ok," in files and "tools" in files
    [down] = [line for line in result.stdout.splitlines() if line.startswith("mcp: down:")]
    assert "NOT connected" in down and "Traceback" not in result.stderr


# --- what the bot cannot use, said clearly --------------------------------------------


async def test_a_tool_that_requires_task_augmented_calls_is_left_out_and_said_once(redis, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="bot.connections.mcp")
    config = write_config(tmp_path, {"crm": stdio_server(tmp_path / "runs", approval="never")})
    model = ScriptedModel([call("crm__add_report_tool", call_id="a1"), model_say("added")])
    runtime, _, _ = make_runtime(redis, model, [])
    async with connected(config, runtime):
        names = set(runtime.tools.names())
        assert "crm__render_video" not in names, "it can never run: this client does not make task calls"
        assert "crm__stats" in names  # taskSupport "optional": a plain call works
        await say(runtime, "add the report tool")  # the server's list changes and is listed again
        await eventually(lambda: "crm__monthly_report" in runtime.tools.names())
        assert "crm__render_video" not in runtime.tools.names()
    said = [r.getMessage() for r in caplog.records if "render_video" in r.getMessage()]
    assert len(said) == 1, said
    assert "task" in said[0] and "left out" in said[0]


@contextmanager
def serving(transport: str, runs_file: Path) -> Iterator[int]:
    """The fixture server over ``transport`` ("http" or "sse") in a process of its own, on a free loopback
    port (yielded) once it accepts connections; stopped afterwards."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), transport, str(port)],
                               env={**os.environ, "MCP_RUNS_FILE": str(runs_file)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, f"the MCP {transport} server did not start"
            time.sleep(0.05)
    try:
        yield port
    finally:
        process.terminate()
        process.wait(5)


@pytest.fixture
def sse_server(tmp_path) -> Iterator[str]:
    """The same server over the old HTTP+SSE transport (FastMCP's sse_app): GET /sse, POST /messages/."""
    with serving("sse", tmp_path / "runs") as port:
        yield f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("path", ["/sse", "/messages/"])
async def test_a_server_on_the_old_sse_transport_is_named_as_such(redis, tmp_path, caplog, sse_server, path):
    caplog.set_level(logging.INFO, logger="bot.connections.mcp")
    config = write_config(tmp_path, {"legacy": {"url": sse_server + path}})
    runtime, _, _ = make_runtime(redis, ScriptedModel([]), [])
    async with connected(config, runtime) as servers:
        problem = servers.servers["legacy"].last_problem or ""
    assert "SSE transport" in problem and "not supported" in problem and "streamable HTTP" in problem, problem
    assert "Session terminated" not in caplog.text
    [line] = [r.getMessage() for r in caplog.records if "'legacy'" in r.getMessage()]
    assert "SSE transport" in line
