"""An MCP tool's preview: the config names another tool of the same server
(``"previews": {"delete_customer": "lookup_customer"}``), called with the proposed arguments when the
card is made; the tool itself runs only once approved. Against the real SDK server of test_mcp_tools."""

from __future__ import annotations

import pytest

from bot.connections.mcp import McpConfigError, load_config
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from tests.engine.harness import approve, make_runtime, say
from tests.test_mcp_tools import connected, runs, stdio_server, write_config


async def test_a_server_tool_named_as_the_preview_is_on_the_card_and_the_tool_waits(redis, tmp_path):
    ran = tmp_path / "runs"
    config = write_config(tmp_path, {"crm": stdio_server(
        ran, approval="always", previews={"delete_customer": "lookup_customer"})})
    model = ScriptedModel([call("crm__delete_customer", customer_id="c7"), model_say("done")])
    runtime, channel, _ = make_runtime(redis, model, [])
    async with connected(config, runtime):
        await say(runtime, "delete c7")
        [card] = channel.requests()
        assert card.preview == "customer c7: Acme Corp"  # lookup_customer's answer, shown before deciding
        assert runs(ran) == []  # delete_customer did not run
        await approve(runtime, card.request_id)
        assert runs(ran) == ["deleted c7"]


def test_a_preview_naming_its_own_tool_is_refused(tmp_path):
    config = write_config(tmp_path, {"crm": stdio_server(tmp_path / "runs", previews={"delete_customer": "delete_customer"})})
    with pytest.raises(McpConfigError, match="previews.delete_customer"):
        load_config(config)
