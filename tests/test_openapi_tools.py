"""OpenAPI operations as tools, against a local HTTP server that serves the document
and the API: arguments validated from the schema, GET runs while POST asks, the tenant from the
session and never from the arguments, credentials from the environment, failures said plainly."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bot.connections.openapi import OpenAPIError, openapi_tools
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from tests.engine.harness import ALICE, make_runtime, say, session, shown, tool_results

DOCUMENT = {
    "openapi": "3.0.3",
    "info": {"title": "CRM", "version": "1"},
    "paths": {
        "/customers/{customer_id}": {
            "get": {
                "operationId": "getCustomer", "summary": "Look up a customer",
                "parameters": [
                    {"name": "customer_id", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "workspace", "in": "query", "required": True, "schema": {"type": "string"}},
                    {"name": "fields", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                ],
            },
        },
        "/customers/{customer_id}/notes": {
            "post": {
                "operationId": "addNote", "summary": "Add a note to a customer",
                "parameters": [{"$ref": "#/components/parameters/CustomerId"},
                               {"name": "workspace", "in": "query", "required": True, "schema": {"type": "string"}}],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Note"}}}},
            },
        },
    },
    "components": {
        "parameters": {"CustomerId": {"name": "customer_id", "in": "path", "required": True,
                                      "schema": {"type": "string"}}},
        "schemas": {"Note": {"type": "object", "required": ["text"], "additionalProperties": False,
                             "properties": {"text": {"type": "string", "maxLength": 200}}}},
    },
}
SEEN: list[dict] = []


@pytest.fixture
async def crm(tmp_path, unused_tcp_port) -> AsyncIterator[str]:
    async def customer(request: web.Request) -> web.Response:
        SEEN.append({"path": request.path, "query": dict(request.query), "auth": request.headers.get("Authorization")})
        return web.json_response({"id": request.match_info["customer_id"], "name": "Acme"})

    async def note(request: web.Request) -> web.Response:
        SEEN.append({"path": request.path, "query": dict(request.query), "body": await request.json()})
        return web.json_response({"ok": True}, status=201)

    app = web.Application()
    app.router.add_get("/api/customers/{customer_id}", customer)
    app.router.add_post("/api/customers/{customer_id}/notes", note)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    (tmp_path / "crm.json").write_text(json.dumps(DOCUMENT))
    (tmp_path / "openapi.yaml").write_text(
        "connections:\n"
        "  - name: crm\n"
        "    spec: crm.json\n"
        f"    base_url: http://127.0.0.1:{unused_tcp_port}/api\n"
        "    operations: [getCustomer, addNote]\n"
        "    auth: {type: bearer, env: CRM_TOKEN}\n"
        "    tenant_parameter: workspace\n")
    SEEN.clear()
    yield str(tmp_path / "openapi.yaml")
    await runner.cleanup()


async def test_a_get_runs_with_the_sessions_tenant_and_the_env_credential(redis, crm, monkeypatch):
    monkeypatch.setenv("CRM_TOKEN", "s3cret")
    tools = openapi_tools(crm)
    assert [t.name for t in tools] == ["crm_getCustomer", "crm_addNote"]
    assert "workspace" not in tools[0].spec().parameters["properties"]  # the model is not told of it
    model = ScriptedModel([call("crm_getCustomer", call_id="g1", customer_id="c 42"), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, tools)
    await say(runtime, "who is c 42?")
    assert channel.requests() == []  # GET: never()
    assert json.loads(tool_results(shown(model))["g1"]) == {"status": 200, "body": {"id": "c 42", "name": "Acme"}}
    assert SEEN == [{"path": "/api/customers/c 42", "query": {"workspace": "T1"}, "auth": "Bearer s3cret"}]


async def test_a_post_asks_first_and_sends_the_validated_body(redis, crm, monkeypatch):
    monkeypatch.setenv("CRM_TOKEN", "s3cret")
    model = ScriptedModel([call("crm_addNote", call_id="n1", customer_id="c1", body={"text": "called back"}),
                           model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, openapi_tools(crm))
    await say(runtime, "note it")
    [req] = channel.requests()
    assert req.kind == "tool-approval" and SEEN == []
    await runtime.answer(InputResponse(request_id=req.request_id, option_id="approve", principal=ALICE))
    await runtime.wait_idle()
    assert SEEN == [{"path": "/api/customers/c1/notes", "query": {"workspace": "T1"}, "body": {"text": "called back"}}]


@pytest.mark.parametrize(("arguments", "says"), [
    ({"customer_id": "c1", "workspace": "T_OTHER"}, "'workspace' was unexpected"),  # the tenant is not an argument
    ({"customer_id": "c1", "fields": 0}, "fields: 0 is less than the minimum of 1"),
    ({}, "'customer_id' is a required property"),
])
async def test_arguments_the_schema_refuses_never_reach_the_api(redis, crm, monkeypatch, arguments, says):
    monkeypatch.setenv("CRM_TOKEN", "s3cret")
    model = ScriptedModel([call("crm_getCustomer", call_id="g1", **arguments), model_say("ok")])
    runtime, _, _ = make_runtime(redis, model, openapi_tools(crm))
    await say(runtime, "look")
    assert says in tool_results(shown(model))["g1"] and SEEN == []


async def test_a_missing_credential_or_an_api_that_is_down_is_a_clear_tool_error(redis, crm, monkeypatch, tmp_path):
    monkeypatch.delenv("CRM_TOKEN", raising=False)
    model = ScriptedModel([call("crm_getCustomer", call_id="g1", customer_id="c1"), model_say("ok")])
    runtime, _, _ = make_runtime(redis, model, openapi_tools(crm))
    await say(runtime, "look")
    assert "needs CRM_TOKEN set" in tool_results(shown(model))["g1"]

    monkeypatch.setenv("CRM_TOKEN", "s3cret")
    down = tmp_path / "down.yaml"
    down.write_text(re.sub(r"base_url: \S+", "base_url: http://127.0.0.1:1/api", open(crm).read()))
    model = ScriptedModel([call("crm_getCustomer", call_id="g2", customer_id="c1"), model_say("ok")])
    runtime, _, _ = make_runtime(redis, model, openapi_tools(str(down)))
    await say(runtime, "look", ref=session("s2"))
    assert "could not be reached" in tool_results(shown(model))["g2"]


def test_a_connection_that_cannot_load_names_what_to_fix(tmp_path, crm):
    broken = tmp_path / "broken.yaml"
    broken.write_text(open(crm).read().replace("[getCustomer, addNote]", "[getCustomer, nope]"))
    with pytest.raises(OpenAPIError, match="no operation nope"):
        openapi_tools(str(broken))
    with pytest.raises(OpenAPIError, match="connections"):
        (tmp_path / "empty.yaml").write_text("{}")
        openapi_tools(str(tmp_path / "empty.yaml"))


def test_a_bad_bot_openapi_stops_the_bot_with_one_line_naming_it(redis_url, tmp_path):
    from tests.test_cli import run

    result = run(["check"], {"BOT_OPENAPI": str(tmp_path / "missing.yaml"), "REDIS_URL": redis_url})
    assert result.returncode == 2 and "BOT_OPENAPI" in result.stderr and "Traceback" not in result.stderr


def test_an_operation_named_like_a_tool_of_bot_tools_stops_the_bot(crm, tmp_path, monkeypatch):
    # the operation would have replaced the team's own tool of that name, under another approval policy
    from bot.app import build_tools
    from bot.config import ConfigError, Settings

    (tmp_path / "crm_shadow.py").write_text(
        "from bot.tools import tool\n\n\n"
        "@tool(name='crm_getCustomer')\n"
        "async def lookup(customer_id: str) -> str:\n"
        "    '''The team's own lookup.'''\n"
        "    return customer_id\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = Settings(_env_file=None, BOT_TOOLS="crm_shadow", BOT_OPENAPI=crm)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match=r"BOT_OPENAPI: two tools are named 'crm_getCustomer'"):
        build_tools(settings)
