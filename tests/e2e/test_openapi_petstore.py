"""The README's OpenAPI example, end to end: the real Swagger Petstore v3 document configured
with ``BOT_OPENAPI`` exactly as the README shows it, the bot started as in production, a person
mentioning it in Slack (localslack, signed like Slack), and a local server playing Petstore.

Finding pets (an array query parameter) runs at once; adding one asks first and runs on Approve; the
``api_key`` the API wants is the one the bot's environment holds, never one the model wrote."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from bot.models.scripted import ScriptedModel, call, say
from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.e2e.test_approval_flow import button, card_in
from tests.test_openapi_real_documents import PET
from tests.test_openapi_real_documents import PETSTORE_CONFIG as README_CONFIG

DOCUMENT = Path(__file__).parents[1] / "data" / "openapi" / "petstore3.openapi.json"
SEEN: list[tuple[str, str, str | None]] = []


@pytest.fixture
async def petstore(tmp_path, unused_tcp_port, monkeypatch) -> AsyncIterator[str]:
    routes = web.RouteTableDef()

    @routes.get("/api/v3/pet/findByTags")
    async def by_tags(request: web.Request) -> web.Response:
        SEEN.append(("GET", request.path_qs, request.headers.get("api_key")))
        return web.json_response([PET] if "good" in request.query.getall("tags", []) else [])

    @routes.post("/api/v3/pet")
    async def add(request: web.Request) -> web.Response:
        SEEN.append(("POST", request.path, request.headers.get("api_key")))
        return web.json_response({**await request.json(), "id": 11})

    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    (tmp_path / "petstore3.openapi.json").write_bytes(DOCUMENT.read_bytes())
    config = tmp_path / "openapi.yaml"
    config.write_text(README_CONFIG.format(base_url=f"http://127.0.0.1:{unused_tcp_port}/api/v3"))
    monkeypatch.setenv("PETSTORE_API_KEY", "special-key")
    SEEN.clear()
    yield str(config)
    await runner.cleanup()


async def test_petstore_as_the_readme_configures_it_answers_in_slack(local_slack, start_app, petstore):
    def answer(messages, tools):
        return say("Petstore said: " + str(messages[-1]["content"]))

    model = ScriptedModel([
        call("petstore_findPetsByTags", tags=["good", "small"]), answer,
        call("petstore_addPet", body={"name": "rex", "photoUrls": [], "status": "pending"}), answer,
    ])
    await start_app(model, [], BOT_OPENAPI=petstore)

    ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> which pets are good?")
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Petstore said" in m.text)
    assert "doggie" in reply.text
    assert SEEN == [("GET", "/api/v3/pet/findByTags?tags=good&tags=small", "special-key")]

    await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> add rex", thread_ts=ts)
    card = await local_slack.wait_for(lambda: card_in(local_slack, ts))
    assert len(SEEN) == 1  # a POST asks first
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Petstore said" in m.text and "rex" in m.text)
    assert SEEN[1] == ("POST", "/api/v3/pet", "special-key")
