"""An external-result tool of a native agent (``bot.backends.native``): the call becomes the external-result card
the built-in loop shows, a person submits the result from the card or a system posts it with a result token
only admitted people get, and the model reads what was posted as the call's result. The tool's function never
runs. Driven through signed Slack requests, with the model on the local OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from bot.backends.native import native
from bot.models.openai import OpenAIChatModel
from bot.models.scripted import ScriptedModel
from localslack.seed import ALICE, BOB, CAROL, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.framework_script import answer_in, told_the_model
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_decisions import inputs
from tests.e2e.test_external import run_migration, tampered, token_of
from tests.fakes.openai_server import FakeOpenAI

KEY = "sk-test"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        server.reply_tool_call("run_migration", {"database": "orders"}, "call_migrate")
        server.reply_text("The migration is done.")
        yield server


def agent_on(fake: FakeOpenAI):  # noqa: ANN201 - a WrappedAgent
    return native(OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key=KEY), [run_migration])


async def test_the_dba_submits_the_result_from_the_card_and_the_model_reads_it(local_slack, start_app, fake):
    bot = await start_app(ScriptedModel([]), [], agent=agent_on(fake))
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    text = json.dumps(card.blocks)
    assert "Run elsewhere" in text and "Run the migration on orders" in text
    labels = [e["text"]["text"] for b in card.blocks if b["type"] == "actions" for e in b["elements"]]
    assert labels == ["Submit result", "Get a result token", "Cancel", "Cancel with reason"]

    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Submit result"))  # not admitted
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(CAROL))
    assert "Only the DBA (bob)" in note[-1].text and local_slack.open_views(CAROL) == []

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Submit result"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(BOB))
    assert set(inputs(modal)) == {"hitl_field:rows_changed", "hitl_field:log_url"}
    bad = await local_slack.submit_view(BOB, modal.id, {"hitl_field:rows_changed": {"value": "-3"}})
    assert "hitl_field:rows_changed" in json.loads(bad.body)["errors"]
    await local_slack.submit_view(BOB, modal.id, {"hitl_field:rows_changed": {"value": "1200"}})

    await answer_in(local_slack, ts, "The migration is done.")
    assert json.loads(told_the_model(fake, "call_migrate")) == {"rows_changed": 1200, "log_url": None}
    assert len(fake.requests) == 2
    settled = json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert "Result submitted" in settled and f"<@{BOB}>" in settled and "1200" in settled
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution")
    assert resolution.actor.endswith(BOB) and resolution.data["values"]["rows_changed"] == 1200


async def test_a_system_posts_the_result_with_a_token_only_the_admitted_get(local_slack, start_app, fake):
    bot = await start_app(ScriptedModel([]), [], agent=agent_on(fake))
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Get a result token"))
    refused = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "Bearer" not in refused[-1].text and "Only the DBA" in refused[-1].text

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Get a result token"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    url, token = token_of(note[-1].text)
    assert url.startswith(bot.url) and "/hitl/requests/" in url

    async with aiohttp.ClientSession() as http:
        async def post(body, auth=f"Bearer {token}", to=url):  # noqa: ANN001, ANN202
            async with http.post(to, data=json.dumps(body), headers={"Authorization": auth}) as r:
                return r.status, await r.json()

        assert (await post({"rows_changed": 5}, auth="Bearer " + tampered(token)))[0] == 401  # tampered
        assert (await post({"rows_changed": 5}, auth=""))[0] == 401
        other = url.replace("/hitl/requests/", "/hitl/requests/x")
        assert (await post({"rows_changed": 5}, to=other))[0] == 401  # bound to its request
        status, answer = await post({"rows_changed": "lots"})
        assert status == 422 and "rows_changed" in answer["error"]
        status, answer = await post({"rows_changed": 7, "log_url": "https://ci.example.com/run/9"})
        assert status == 200 and answer["ok"] is True
        status, _ = await post({"rows_changed": 8})  # single use: the request is settled
        assert status == 409

    await answer_in(local_slack, ts, "The migration is done.")
    told = json.loads(told_the_model(fake, "call_migrate"))
    assert told == {"rows_changed": 7, "log_url": "https://ci.example.com/run/9"}
    settled = json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert "Sent from another system" in settled and f"<@{BOB}>" in settled
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution")
    assert resolution.actor.endswith(BOB) and resolution.data["via"] == "api"


async def test_cancelling_the_external_call_tells_the_model_it_did_not_run(local_slack, start_app, fake):
    await start_app(ScriptedModel([]), [], agent=agent_on(fake))
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Cancel"))
    await answer_in(local_slack, ts, "The migration is done.")
    told = json.loads(told_the_model(fake, "call_migrate"))
    assert told["status"] == "rejected" and "rows_changed" not in told


def test_a_policy_given_for_an_external_tool_is_refused_not_ignored():
    """Who may post a result is the tool's own response policy (the engine settles the call under it): a policy
    given beside the agent for that tool would be silently unused, so it is refused."""
    from bot.approval import always
    from bot.backends import wrap
    from bot.backends.proxies import proxy_tools

    agent = native(OpenAIChatModel("gpt-4o-mini", base_url="http://127.0.0.1:9", api_key=KEY), [run_migration])
    registered = proxy_tools(agent)
    assert registered == [run_migration]  # the tool itself, not a proxy: its result form and model
    with pytest.raises(ValueError, match="run_migration"):
        proxy_tools(wrap(agent, policies={"run_migration": always()}))
