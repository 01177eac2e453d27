"""Real OpenAPI documents nobody here wrote (and the README's Petstore section):

- GitHub's full REST description (``api.github.com.json`` of the npm package ``@octokit/openapi``, MIT,
  gzipped in tests/data/openapi) loads with a few configured operations, quickly and in little memory,
  and those operations work against a local server playing GitHub;
- the Swagger Petstore v3 document (``openapi.json`` of swagger-petstore v3, Apache-2.0, as shipped in
  the npm package ``swagger-editor-dist``), configured the way the README shows it, works against a
  local server playing Petstore."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from bot.connections.openapi import OpenAPIError, openapi_tools
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from bot.protocol import InputResponse
from tests.engine.harness import ALICE, make_runtime, say, shown, tool_results

DATA = Path(__file__).parent / "data" / "openapi"
NAME_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's rule for function names
SEEN: list[dict] = []


async def serve(routes: web.RouteTableDef, port: int) -> web.AppRunner:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def seen(request: web.Request, body: object = None) -> None:
    SEEN.append({"method": request.method, "path": request.raw_path.split("?")[0],
                 "query": list(request.query.items()), "auth": request.headers.get("Authorization"),
                 "api_key": request.headers.get("api_key"), "body": body})


async def run_calls(redis, tools, *calls, approve: bool = False) -> dict[str, str]:
    model = ScriptedModel([*calls, model_say("done")])
    runtime, channel, _ = make_runtime(redis, model, tools)
    await say(runtime, "go")
    answered: set[str] = set()
    while approve and (open_ := [r for r in channel.requests() if r.request_id not in answered]):
        for request in open_:  # a step's cards may come one after another
            answered.add(request.request_id)
            await runtime.answer(InputResponse(request_id=request.request_id, option_id="approve", principal=ALICE))
        await runtime.wait_idle()
    return tool_results(shown(model))


# --- GitHub -------------------------------------------------------------------------------

GITHUB_OPERATIONS = "[repos/get, issues/create, issues/list-for-repo, pulls/list]"


@pytest.fixture(scope="module")
def github_document(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("github") / "api.github.com.json"
    path.write_bytes(gzip.decompress((DATA / "api.github.com.json.gz").read_bytes()))
    return path


def github_config(document: Path, port: int) -> str:
    config = document.parent / f"github-{port}.yaml"
    config.write_text("connections:\n"
                      "  - name: github\n"
                      f"    spec: {document.name}\n"
                      f"    base_url: http://127.0.0.1:{port}\n"
                      f"    operations: {GITHUB_OPERATIONS}\n"
                      "    auth: {type: bearer, env: GITHUB_TOKEN}\n")
    return str(config)


def test_the_full_github_document_loads_only_what_is_configured_in_little_time_and_memory(github_document):
    """In a fresh process, as the bot starts: before the fix this failed after ~23 s and ~500 MB."""
    probe = textwrap.dedent(f"""
        import json, re, time
        started = time.perf_counter()
        from bot.connections.openapi import openapi_tools
        tools = openapi_tools({github_config(github_document, 1)!r})
        print(json.dumps({{"seconds": time.perf_counter() - started,
                          # VmHWM is this program's own peak: ru_maxrss keeps the forking pytest's across exec
                          "rss_mb": int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read())[1]) / 1024,
                          "names": [t.name for t in tools],
                          "schema_chars": sum(len(json.dumps(t.schema)) for t in tools)}}))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    print(measured)
    assert len(measured["names"]) == 4 and all(NAME_RULE.match(n) for n in measured["names"])
    # the 13 MB document parsed once; nothing of the ~1,000 unconfigured operations built
    assert measured["rss_mb"] < 300, measured
    assert measured["schema_chars"] < 100_000, measured
    assert measured["seconds"] < 10, measured  # generous: about 1 s here


@pytest.fixture
async def github(unused_tcp_port, github_document, monkeypatch) -> AsyncIterator[str]:
    routes = web.RouteTableDef()

    @routes.get("/repos/{owner}/{repo}")
    async def repo(request: web.Request) -> web.Response:
        seen(request)
        return web.json_response({"id": 1, "full_name": f"{request.match_info['owner']}/{request.match_info['repo']}"})

    @routes.get("/repos/{owner}/{repo}/issues")
    async def issues(request: web.Request) -> web.Response:
        seen(request)
        return web.json_response([{"number": 7, "title": "bug"}])

    @routes.post("/repos/{owner}/{repo}/issues")
    async def create(request: web.Request) -> web.Response:
        seen(request, await request.json())
        return web.json_response({"number": 8}, status=201)

    runner = await serve(routes, unused_tcp_port)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_local_test_token_123")
    SEEN.clear()
    yield github_config(github_document, unused_tcp_port)
    await runner.cleanup()


async def test_configured_github_operations_work(redis, github):
    tools = {t.name: t for t in openapi_tools(github)}
    names = {op: next(n for n in tools if n.startswith("github_" + op.replace("/", "_")))
             for op in ("repos/get", "issues/list-for-repo", "issues/create")}
    results = await run_calls(
        redis, list(tools.values()),
        call(names["repos/get"], call_id="r", owner="octo", repo="hello"),
        call(names["issues/list-for-repo"], call_id="l", owner="octo", repo="hello", labels="bug", state="open"),
        call(names["issues/create"], call_id="c", owner="octo", repo="hello",
             body={"title": "It broke", "labels": ["bug"], "milestone": None}),
        approve=True)
    assert json.loads(results["r"])["body"]["full_name"] == "octo/hello"
    assert json.loads(results["l"])["body"] == [{"number": 7, "title": "bug"}]
    assert json.loads(results["c"])["status"] == 201
    assert [(s["method"], s["path"]) for s in SEEN] == [
        ("GET", "/repos/octo/hello"), ("GET", "/repos/octo/hello/issues"), ("POST", "/repos/octo/hello/issues")]
    assert ("state", "open") in SEEN[1]["query"] and SEEN[0]["auth"] == "Bearer ghp_local_test_token_123"
    assert SEEN[2]["body"] == {"title": "It broke", "labels": ["bug"], "milestone": None}


# --- load errors and recursive schemas ------------------------------------------------


def _document(body_schema: dict, schemas: dict) -> dict:
    return {"openapi": "3.0.3", "info": {"title": "t", "version": "1"},
            "paths": {"/trees": {"post": {"operationId": "plant", "requestBody": {"content": {
                "application/json": {"schema": body_schema}}}}},
                "/other": {"post": {"operationId": "broken", "requestBody": {"content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Deep0"}}}}}}},
            "components": {"schemas": schemas}}


DEEP = {f"Deep{i}": {"type": "object", "properties": {"next": {"$ref": f"#/components/schemas/Deep{i + 1}"}}}
        for i in range(60)} | {"Deep60": {"type": "string"}}
NODE = {"Node": {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}}


def _connection(tmp_path: Path, document: dict, operations: str) -> str:
    (tmp_path / "trees.json").write_text(json.dumps(document))
    (tmp_path / "c.yaml").write_text("connections:\n  - name: trees\n    spec: trees.json\n"
                                     f"    base_url: http://127.0.0.1:1\n    operations: {operations}\n")
    return str(tmp_path / "c.yaml")


def test_a_recursive_schema_loads_and_validates_at_every_depth(tmp_path):
    config = _connection(tmp_path, _document({"$ref": "#/components/schemas/Node"}, {**NODE, **DEEP}), "[plant]")
    [tool] = openapi_tools(config)  # the unconfigured "broken" operation is never looked at
    deep = {"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": [{"name": "d"}]}]}]}
    assert tool.parse({"body": deep}) == {"body": deep}
    with pytest.raises(ValueError, match="'name' is a required property"):
        tool.parse({"body": {"name": "a", "children": [{"children": [{"name": "d"}]}]}})


def test_a_schema_that_cannot_load_names_the_file_the_connection_and_the_operation(tmp_path):
    config = _connection(tmp_path, _document({"$ref": "#/components/schemas/Node"}, {**NODE, **DEEP}),
                         "[plant, broken]")
    with pytest.raises(OpenAPIError, match=r"BOT_OPENAPI trees: trees\.json, operation broken: .*nests"):
        openapi_tools(config)


# --- Petstore v3, as the README configures it --------------------------------------------------

PETSTORE_CONFIG = """\
connections:
  - name: petstore
    spec: ./petstore3.openapi.json      # or https://petstore3.swagger.io/api/v3/openapi.json
    base_url: {base_url}
    operations: [findPetsByStatus, findPetsByTags, getPetById, addPet, deletePet]
    auth: {{type: header, name: api_key, env: PETSTORE_API_KEY}}
"""
PET = {"id": 10, "name": "doggie", "photoUrls": [], "status": "available", "tags": [{"id": 1, "name": "good"}]}


@pytest.fixture
async def petstore(tmp_path, unused_tcp_port, monkeypatch) -> AsyncIterator[str]:
    routes = web.RouteTableDef()

    def authorised(request: web.Request) -> bool:
        return request.headers.get("api_key") == "special-key"

    @routes.get("/api/v3/pet/findByStatus")
    async def by_status(request: web.Request) -> web.Response:
        seen(request)
        return web.json_response([PET] if request.query.get("status") == "available" else [])

    @routes.get("/api/v3/pet/findByTags")
    async def by_tags(request: web.Request) -> web.Response:
        seen(request)
        tags = request.query.getall("tags", [])
        return web.json_response([PET] if "good" in tags else [])

    @routes.get("/api/v3/pet/{petId}")
    async def by_id(request: web.Request) -> web.Response:
        seen(request)
        if not authorised(request):
            return web.json_response({"message": "unauthorised"}, status=401)
        return web.json_response(PET if request.match_info["petId"] == "10" else {"message": "Pet not found"},
                                 status=200 if request.match_info["petId"] == "10" else 404)

    @routes.post("/api/v3/pet")
    async def add(request: web.Request) -> web.Response:
        body = await request.json()
        seen(request, body)
        return web.json_response({**body, "id": 11})

    @routes.delete("/api/v3/pet/{petId}")
    async def delete(request: web.Request) -> web.Response:
        seen(request)
        return web.Response(status=200 if authorised(request) else 401)

    runner = await serve(routes, unused_tcp_port)
    (tmp_path / "petstore3.openapi.json").write_bytes((DATA / "petstore3.openapi.json").read_bytes())
    (tmp_path / "openapi.yaml").write_text(PETSTORE_CONFIG.format(base_url=f"http://127.0.0.1:{unused_tcp_port}/api/v3"))
    monkeypatch.setenv("PETSTORE_API_KEY", "special-key")
    SEEN.clear()
    yield str(tmp_path / "openapi.yaml")
    await runner.cleanup()


async def test_petstore_v3_configured_as_the_readme_shows_works(redis, petstore):
    tools = openapi_tools(petstore)
    assert [t.name for t in tools] == ["petstore_findPetsByStatus", "petstore_findPetsByTags",
                                       "petstore_getPetById", "petstore_addPet", "petstore_deletePet"]
    delete = tools[-1].spec().parameters
    assert "api_key" not in delete["properties"]  # the configured credential is not the model's to set
    results = await run_calls(
        redis, tools,
        call("petstore_findPetsByStatus", call_id="s", status="available"),
        call("petstore_findPetsByTags", call_id="t", tags=["good", "small"]),
        call("petstore_getPetById", call_id="g", petId=10),
        call("petstore_getPetById", call_id="m", petId=99),
        call("petstore_addPet", call_id="a", body={"name": "rex", "photoUrls": ["u"], "status": "pending"}),
        call("petstore_deletePet", call_id="d", petId=10),
        approve=True)
    assert json.loads(results["s"])["body"] == [PET]
    assert json.loads(results["t"])["body"] == [PET]
    assert json.loads(results["g"])["body"]["name"] == "doggie"
    assert "answered 404" in results["m"] and "Pet not found" in results["m"]
    assert json.loads(results["a"])["body"]["id"] == 11
    assert json.loads(results["d"])["status"] == 200
    by_path = {(s["method"], s["path"]): s for s in SEEN}
    assert by_path[("GET", "/api/v3/pet/findByTags")]["query"] == [("tags", "good"), ("tags", "small")]
    assert by_path[("GET", "/api/v3/pet/10")]["api_key"] == "special-key"
