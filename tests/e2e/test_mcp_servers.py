"""MCP tools over streamable HTTP, through Slack: the real app started with
``BOT_MCP_CONFIG`` naming a real MCP server (tests/fixtures_tools/mcp_server.py, run by uvicorn in a
process of its own), a header filled in from the environment, an approval card and the server's
elicitation as a form card in the thread, both settled by clicks over signed HTTP and audited."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from localslack.seed import ALICE, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.conftest import app_starter
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_decisions import inputs, result_reply
from tests.engine.harness import tool_results
from tests.test_mcp_tools import free_port, runs, serving, write_config


@pytest.fixture(scope="module")
def http_server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """The same server over streamable HTTP (uvicorn, in a process of its own) on a free loopback port."""
    ran = tmp_path_factory.mktemp("mcp-http") / "runs"
    with serving("http", ran) as port:
        yield f"http://127.0.0.1:{port}/mcp", ran


async def test_over_http_through_slack_approve_then_fill_in_the_servers_form(
    local_slack, redis, redis_url, tmp_path, http_server, monkeypatch
):
    url, ran = http_server
    monkeypatch.setenv("CRM_MCP_TOKEN", "s3cret")
    config = write_config(
        tmp_path,
        {
            "crm": {
                "url": url,
                "headers": {"Authorization": "Bearer ${CRM_MCP_TOKEN}"},
                "policies": {"whoami": "never"},  # the rest: always()
            },
            # down: the bot starts and serves all the same
            "billing": {"url": f"http://127.0.0.1:{free_port()}/mcp"},
        },
    )
    model = ScriptedModel(
        [
            call("crm__whoami", call_id="w1"),
            call("crm__ship_order", call_id="s1", order="o7"),
            lambda messages, tools: model_say("Result: " + json.dumps(tool_results(messages))),
        ]
    )
    async with app_starter(local_slack, redis_url, tmp_path, BOT_MCP_CONFIG=config) as start:
        bot = await start(model, [])
        ts, card = await mention_and_wait_for_card(local_slack, "ship order o7")
        assert "crm__ship_order" in json.dumps(card.blocks)
        await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))

        form_card = await local_slack.wait_for(
            lambda: next(
                (
                    m
                    for m in local_slack.messages(GENERAL, thread_ts=ts)
                    if "Open form" in json.dumps(m.blocks or [])
                ),
                None,
            )
        )
        assert "Where should order o7 go?" in json.dumps(form_card.blocks) and runs(ran) == []
        await local_slack.click(ALICE, GENERAL, form_card.ts, button(form_card, "Open form"))
        [modal] = await local_slack.wait_for(lambda: local_slack.open_views(ALICE))
        assert list(inputs(modal)) == ["hitl_field:address", "hitl_field:boxes"]
        await local_slack.submit_view(
            ALICE,
            modal.id,
            {"hitl_field:address": {"value": "9 Elm Road"}, "hitl_field:boxes": {"value": "2"}},
        )

        told = await result_reply(local_slack, ts)
        # the server got the header filled in from the environment, and echoed it: the model reads the
        # echo with the secret redacted, as the logs would (the rule for every connection)
        assert json.loads(told["w1"]) == {"result": "Bearer ***"}
        assert "s3cret" not in json.dumps(told)
        assert "shipped o7 to 9 Elm Road in 2 boxes" in told["s1"]
        assert runs(ran) == ["shipped o7 to 9 Elm Road x2"]  # approved once, asked once, shipped once
        resolutions = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution",
                                          until=lambda found: len(found) >= 2)
        assert len(resolutions) == 2  # the approval and the form, in the one audit log
