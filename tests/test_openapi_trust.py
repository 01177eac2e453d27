"""OpenAPI connections keep the tenant and the secret, against a real local
HTTP server that records exactly what it received: the raw path, every query pair, the headers and
the body. The model is scripted; everything between it and the server is the real code."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from aiohttp import web

from bot.connections.openapi import OpenAPIError, openapi_tools
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.ops import logs
from tests.engine.harness import make_runtime, say, session, shown, tool_results

KEY = "pk-live-7f3a9c2e1b"  # the connection's secret: never sent but by us, never shown
TENANT_PARAM = {"name": "workspace", "in": "path", "required": True, "schema": {"type": "string"}}
DOCUMENT = {
    "openapi": "3.0.3",
    "info": {"title": "Notes", "version": "1"},
    "paths": {
        "/workspaces/{workspace}/files/{folder}/{name}/{part}": {"get": {
            "operationId": "getFilePart",
            "parameters": [TENANT_PARAM, *({"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
                                           for n in ("folder", "name", "part"))],
        }},
        "/workspaces/{workspace}/pets/{petId}": {"get": {
            "operationId": "getPet",
            "parameters": [TENANT_PARAM,
                           {"name": "petId", "in": "path", "required": True, "schema": {"type": "integer"}},
                           # Petstore declares its api_key header on operations too: the model must not set it
                           {"name": "api_key", "in": "header", "schema": {"type": "string"}},
                           {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}],
        }},
        "/notes": {"post": {
            "operationId": "notes/create",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "$ref": "#/components/schemas/NewNote"}}}},
        }},
        "/notes/{id}": {"patch": {
            "operationId": "notes/update",
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {
                "text": {"type": "string"},
                "due": {"type": "string", "format": "date", "nullable": True},
                "colour": {"type": "string", "enum": ["red", "blue"], "nullable": True}}}}}},
        }},
        "/pets": {"get": {
            "operationId": "findPets",
            "parameters": [
                {"name": "tags", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                {"name": "ids", "in": "query", "explode": False,
                 "schema": {"type": "array", "items": {"type": "integer"}}},
                {"name": "sizes", "in": "query", "style": "spaceDelimited", "explode": False,
                 "schema": {"type": "array", "items": {"type": "string"}}},
                {"name": "colours", "in": "query", "style": "pipeDelimited", "explode": False,
                 "schema": {"type": "array", "items": {"type": "string"}}},
                {"name": "filter", "in": "query", "style": "deepObject", "explode": True,
                 "schema": {"type": "object", "properties": {"age": {"type": "integer"},
                                                             "kind": {"type": "string"}}}},
                {"name": "vaccinated", "in": "query", "schema": {"type": "boolean"}},
            ],
        }},
        "/echo": {"get": {"operationId": "echo", "parameters": [
            {"name": "fail", "in": "query", "schema": {"type": "boolean"}},
            {"name": "token", "in": "query", "schema": {"type": "string"}},
            {"name": "sid", "in": "cookie", "schema": {"type": "string"}}]}},
    },
    "components": {"schemas": {
        "NewNote": {"type": "object", "required": ["workspace", "text", "owner"], "properties": {
            "workspace": {"type": "string"},
            "text": {"type": "string"},
            "owner": {"type": "object", "required": ["workspace", "name"], "properties": {
                "workspace": {"type": "string"}, "name": {"type": "string"}}},
            "meta": {"type": "object"}}},
    }},
}
SEEN: list[dict] = []
SESSIONS = itertools.count()


def config(port: int, *, auth: str = "{type: header, name: api_key, env: NOTES_KEY}") -> str:
    return ("connections:\n"
            "  - name: notes\n"
            "    spec: notes.json\n"
            f"    base_url: http://127.0.0.1:{port}/api\n"
            "    operations: [getFilePart, getPet, notes/create, notes/update, findPets, echo]\n"
            f"    auth: {auth}\n"
            "    tenant_parameter: workspace\n"
            "    approval: {notes/create: never, notes/update: never}\n")


@pytest.fixture
async def notes(tmp_path, unused_tcp_port, monkeypatch) -> AsyncIterator[str]:
    """A local API that records every request as received, and echoes the key back when asked to."""
    async def anything(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        SEEN.append({"method": request.method, "path": request.raw_path.split("?")[0],
                     "query": list(request.query.items()), "api_key": request.headers.get("api_key"),
                     "trace": request.headers.get("X-Trace"), "cookies": dict(request.cookies), "body": body})
        if request.path.endswith("/echo"):  # a careless API: it quotes the credential back
            answer = {"message": f"key {request.headers.get('api_key')} is rate limited"}
            return web.json_response(answer, status=429 if request.query.get("fail") == "true" else 200)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    (tmp_path / "notes.json").write_text(json.dumps(DOCUMENT))
    (tmp_path / "openapi.yaml").write_text(config(unused_tcp_port))
    monkeypatch.setenv("NOTES_KEY", KEY)
    SEEN.clear()
    yield str(tmp_path / "openapi.yaml")
    await runner.cleanup()


async def run_call(redis, config_path: str, tool: str, **arguments) -> str:
    """What the model reads back after calling ``tool`` once in workspace T1."""
    tools = {t.name: t for t in openapi_tools(config_path)}
    model = ScriptedModel([call(tool, call_id="c1", **arguments), model_say("ok")])
    runtime, _, _ = make_runtime(redis, model, list(tools.values()))
    await say(runtime, "go", ref=session(f"s{next(SESSIONS)}"))  # a thread of its own
    return tool_results(shown(model))["c1"]


# --- a path parameter is one opaque segment ---------------------------------------------


@pytest.mark.parametrize("values", [
    {"folder": "..", "name": "..", "part": "T2"},  # would climb to /workspaces/T2
    {"folder": ".", "name": "..", "part": "x"},
    {"folder": "a", "name": "", "part": "x"},  # an empty segment shifts the others
])
async def test_a_dot_segment_in_a_path_parameter_never_leaves_the_tenant(redis, notes, values):
    result = await run_call(redis, notes, "notes_getFilePart", **values)
    assert SEEN == [], f"the API was called at {SEEN[0]['path'] if SEEN else ''}"
    assert "path parameter" in result


async def test_a_path_parameter_with_slashes_or_dots_inside_stays_one_segment(redis, notes):
    await run_call(redis, notes, "notes_getFilePart", folder="../T2", name="a b?c#d", part="...")
    [seen] = SEEN
    assert seen["path"] == "/api/workspaces/T1/files/..%2FT2/a%20b%3Fc%23d/..."


# --- configured credentials always win --------------------------------------------------


async def test_the_model_is_not_offered_the_credential_header_and_cannot_set_it(redis, notes):
    [get_pet] = [t for t in openapi_tools(notes) if t.name == "notes_getPet"]
    assert "api_key" not in get_pet.spec().parameters["properties"]
    result = await run_call(redis, notes, "notes_getPet", petId=7, api_key="attacker-key", **{"X-Trace": "t1"})
    assert "'api_key' was unexpected" in result and SEEN == []
    await run_call(redis, notes, "notes_getPet", petId=7, **{"X-Trace": "t1"})
    assert [(s["path"], s["api_key"], s["trace"]) for s in SEEN] == [("/api/workspaces/T1/pets/7", KEY, "t1")]


@pytest.mark.parametrize(("where", "name"), [("query", "token"), ("cookie", "sid")])
async def test_a_query_or_cookie_credential_is_not_the_models_either(redis, notes, unused_tcp_port, where, name):
    Path(notes).write_text(config(unused_tcp_port, auth=f"{{type: {where}, name: {name}, env: NOTES_KEY}}"))
    [echo] = [t for t in openapi_tools(notes) if t.name == "notes_echo"]
    assert name not in echo.spec().parameters["properties"]
    assert "was unexpected" in await run_call(redis, notes, "notes_echo", **{name: "attacker"}) and SEEN == []
    await run_call(redis, notes, "notes_echo")
    sent = dict(SEEN[0]["query"]) if where == "query" else SEEN[0]["cookies"]
    assert sent[name] == KEY


# --- a tenant in the JSON body is pinned ------------------------------------------------


async def test_a_tenant_in_the_body_is_filled_from_the_session_at_every_level(redis, notes):
    [create] = [t for t in openapi_tools(notes) if t.name.replace("/", "_").startswith("notes_notes_create")]
    body = create.spec().parameters["properties"]["body"]
    assert "workspace" not in body["properties"] and "workspace" not in body["properties"]["owner"]["properties"]
    result = await run_call(redis, notes, create.name, body={"text": "hi", "owner": {"name": "ann"}})
    assert json.loads(result)["status"] == 200
    assert SEEN[0]["body"] == {"text": "hi", "workspace": "T1", "owner": {"name": "ann", "workspace": "T1"}}

    SEEN.clear()  # where the schema lets the model add keys, the tenant's name is still not the model's
    result = await run_call(redis, notes, create.name,
                            body={"text": "hi", "owner": {"name": "ann"}, "meta": {"workspace": "T2"}})
    assert SEEN == [] and "workspace" in result


def test_a_tenant_the_loader_cannot_pin_refuses_the_connection_naming_why(tmp_path):
    document = json.loads(json.dumps(DOCUMENT))
    document["components"]["schemas"]["NewNote"]["properties"]["shares"] = {
        "type": "array", "items": {"type": "object", "properties": {"workspace": {"type": "string"}}}}
    (tmp_path / "notes.json").write_text(json.dumps(document))
    (tmp_path / "c.yaml").write_text(config(1))
    with pytest.raises(OpenAPIError, match=r"notes.*notes/create.*workspace.*body\.shares\[\]"):
        openapi_tools(str(tmp_path / "c.yaml"))


# --- the secret is redacted from what the model reads and from the logs ------------------


@pytest.fixture
def log_text() -> Iterator[list[str]]:
    """Every line logged meanwhile, formatted as the bot formats it, with message text shown."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(logs.TextFormatter().format(record))

    root, handler = logging.getLogger(), Keep()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logs.show_content(True)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        logs.show_content(False)


@pytest.mark.parametrize("fail", [False, True])
async def test_an_api_that_echoes_the_key_never_shows_it_to_the_model_or_the_logs(redis, notes, log_text, fail):
    result = await run_call(redis, notes, "notes_echo", fail=fail)
    assert SEEN[0]["api_key"] == KEY  # it was sent
    assert "rate limited" in result and KEY not in result
    assert log_text and KEY not in "\n".join(log_text)


# --- names the model API accepts ---------------------------------------------------------


def test_tool_names_fit_the_model_apis_rule_and_are_stable(notes):
    names = [t.name for t in openapi_tools(notes)]
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in names), names
    assert names[:2] == ["notes_getFilePart", "notes_getPet"]  # valid names are left as they were
    assert names == [t.name for t in openapi_tools(notes)]  # stable across loads
    assert len(set(names)) == len(names)


# --- query styles, and nullable ----------------------------------------------------------


async def test_query_parameters_are_serialized_by_their_style(redis, notes):
    await run_call(redis, notes, "notes_findPets", tags=["a", "b c"], ids=[1, 2], sizes=["s", "m"],
                   colours=["red", "blue"], filter={"age": 3, "kind": "cat"}, vaccinated=True)
    assert SEEN[0]["query"] == [("tags", "a"), ("tags", "b c"), ("ids", "1,2"), ("sizes", "s m"),
                                ("colours", "red|blue"), ("filter[age]", "3"), ("filter[kind]", "cat"),
                                ("vaccinated", "true")]


async def test_a_nullable_field_can_be_cleared_with_null(redis, notes):
    [update] = [t for t in openapi_tools(notes) if t.name.replace("/", "_").startswith("notes_notes_update")]
    result = await run_call(redis, notes, update.name, id="n1", body={"due": None, "colour": None})
    assert json.loads(result)["status"] == 200, result
    assert SEEN[0]["body"] == {"due": None, "colour": None}



# --- a document fetched from a URL: the host the operator configured is pinned ---------------------


class Host:
    """A local HTTP server in a thread of its own (the loader fetches synchronously): serves ``routes``
    (path → (status, headers, body)) and records every request with its credential header."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.seen: list[tuple[str, str | None]] = []
        host = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                host.seen.append((self.path, self.headers.get("api_key")))
                status, headers, body = host.routes.get(self.path.split("?")[0], (404, {}, b"{}"))
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, path: str, document: dict | None = None, *, redirect: str | None = None) -> str:
        self.routes[path] = (302, {"Location": redirect}, b"") if redirect else (200, {}, json.dumps(document).encode())
        return self.url + path


@pytest.fixture
def hosts(tmp_path, monkeypatch) -> Iterator[tuple[Host, Host]]:
    """The API's own host (where the operator said the document is) and another one."""
    ours, other = Host(), Host()
    other.routes["/api/echo"] = (200, {}, b'{"ok": true}')
    monkeypatch.setenv("NOTES_KEY", KEY)
    yield ours, other
    ours.server.shutdown()
    other.server.shutdown()


def fetched_config(tmp_path, spec: str) -> str:
    path = tmp_path / "fetched.yaml"
    path.write_text("connections:\n  - name: notes\n"
                    f"    spec: {spec}\n"
                    "    operations: [echo]\n"
                    "    auth: {type: header, name: api_key, env: NOTES_KEY}\n")
    return str(path)


def serving_at(server: str) -> dict:
    return {**DOCUMENT, "servers": [{"url": server}]}


async def load_and_call(redis, config_path: str) -> str:
    """Load the connection as the bot does at start; if it loads, let the model call it once."""
    try:
        await asyncio.to_thread(openapi_tools, config_path)
    except OpenAPIError as exc:
        return f"refused: {exc}"
    return await run_call(redis, config_path, "notes_echo")


async def test_a_fetched_document_naming_another_host_is_refused_and_the_key_stays_home(redis, hosts, tmp_path):
    ours, other = hosts
    spec = ours.serve("/openapi.json", serving_at(f"{other.url}/api"))
    said = await load_and_call(redis, fetched_config(tmp_path, spec))
    assert other.seen == []  # no request at all, let alone with the key
    assert said.startswith("refused:") and f"names the server {other.url}/api" in said and "base_url" in said, said


async def test_a_document_url_that_redirects_to_another_host_is_not_followed(redis, hosts, tmp_path):
    ours, other = hosts
    other.serve("/openapi.json", serving_at(f"{other.url}/api"))
    spec = ours.serve("/moved.json", redirect=f"{other.url}/openapi.json")
    said = await load_and_call(redis, fetched_config(tmp_path, spec))
    assert other.seen == []
    assert said.startswith("refused:") and f"redirects to {other.url}/openapi.json" in said, said


async def test_a_fetched_document_on_the_configured_host_is_served_from_there(redis, hosts, tmp_path):
    """Its own server, relative (as Petstore's ``/api/v3``) or absolute, and a redirect on the same host, are
    taken: the call and its key go where the operator pointed."""
    ours, other = hosts
    ours.routes["/api/echo"] = (200, {}, b'{"ok": true}')
    ours.serve("/v2/openapi.json", serving_at("/api"))
    spec = ours.serve("/openapi.json", redirect="/v2/openapi.json")
    said = await load_and_call(redis, fetched_config(tmp_path, spec))
    assert json.loads(said)["status"] == 200, said
    assert ("/api/echo", KEY) in ours.seen and other.seen == []
