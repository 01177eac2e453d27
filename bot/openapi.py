"""OpenAPI operations as tools (DESIGN §6): an OpenAPI 3 document plus the operation ids to offer.

Each operation becomes a tool of the registry, under the same policies as any tool: its arguments are
the operation's path, query and header parameters plus ``body`` (its JSON request body), described to
the model with their JSON schemas and validated against them (``jsonschema``) before any policy runs.
GET and HEAD run without asking (``never()``); every other method asks (``always()``); the connection's
``approval`` map overrides either per operation.

The tenant rule holds: a ``tenant_parameter`` is filled from the session's workspace and is not an
argument at all (the model is not told of it, and an argument of that name is refused). Credentials
come from the environment when a call is made (``auth``), never from the document or the model.

Connections are listed in the file ``BOT_OPENAPI`` names (JSON or YAML)::

    connections:
      - name: crm
        spec: ./crm.openapi.yaml        # a file, or an http(s) URL
        base_url: https://crm.example.com/api   # default: the document's first server
        operations: [getCustomer, createNote]
        auth: {type: bearer, env: CRM_TOKEN}    # or {type: header, name: X-Api-Key, env: CRM_KEY}
        tenant_parameter: workspace
        approval: {getCustomer: always}         # never | always | once
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import httpx
import yaml
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field

from bot.approval import RequestPolicy, always, never, once
from bot.models.base import ToolSpec
from bot.schema_refs import inline_refs
from bot.tools import Tool, ToolContext

CALL_TIMEOUT_S = 30.0
RESULT_CHARS = 20_000  # of a response body handed to the model
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_POLICIES = {"never": never, "always": always, "once": once}


class OpenAPIError(ValueError):
    """A connection that can't be loaded; the message names the connection and what to fix."""


class Auth(BaseModel):
    type: Literal["bearer", "header"]
    env: str  # the environment variable holding the secret
    name: str = "Authorization"  # the header, for type "header"


class Connection(BaseModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,30}$")
    spec: str
    base_url: str | None = None
    operations: list[str] = Field(min_length=1)
    auth: Auth | None = None
    tenant_parameter: str | None = None
    approval: dict[str, Literal["never", "always", "once"]] = Field(default_factory=dict)


class Parameter(BaseModel):
    name: str
    where: Literal["path", "query", "header"]
    required: bool = False
    schema_: dict[str, Any] = Field(default_factory=dict)
    description: str = ""


class Operation(BaseModel):
    operation_id: str
    method: str
    path: str
    summary: str = ""
    parameters: list[Parameter] = Field(default_factory=list)
    body: dict[str, Any] | None = None  # the JSON request body's schema
    body_required: bool = False

    def arguments_schema(self, tenant_parameter: str | None) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        for p in self.parameters:
            if p.name == tenant_parameter:
                continue  # filled from the session, never by the model
            properties[p.name] = {**p.schema_, **({"description": p.description} if p.description else {})}
            if p.required:
                required.append(p.name)
        if self.body is not None:
            properties["body"] = self.body
            if self.body_required:
                required.append("body")
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def load_connections(config_path: str) -> list[Connection]:
    try:
        raw = yaml.safe_load(Path(config_path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise OpenAPIError(f"BOT_OPENAPI: cannot read {config_path}: {exc}") from exc
    items = (raw or {}).get("connections") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise OpenAPIError(f"BOT_OPENAPI: {config_path} needs a 'connections' list")
    try:
        return [Connection.model_validate(item) for item in items]
    except ValueError as exc:
        raise OpenAPIError(f"BOT_OPENAPI: {exc}") from exc


def load_document(spec: str, *, relative_to: Path | None = None) -> dict[str, Any]:
    """An OpenAPI document from a file or an http(s) URL (JSON or YAML)."""
    if spec.startswith(("http://", "https://")):
        text = httpx.get(spec, timeout=CALL_TIMEOUT_S, follow_redirects=True).raise_for_status().text
    else:
        path = Path(spec) if relative_to is None or Path(spec).is_absolute() else relative_to / spec
        text = path.read_text()
    document = yaml.safe_load(text)
    if not isinstance(document, dict) or not str(document.get("openapi", "")).startswith("3"):
        raise OpenAPIError(f"{spec} is not an OpenAPI 3 document")
    return document


def operations_of(document: dict[str, Any]) -> dict[str, Operation]:
    """Every operation of the document, by operation id, its ``$ref``s inlined."""
    found: dict[str, Operation] = {}
    for path, item in (document.get("paths") or {}).items():
        shared = item.get("parameters", [])
        for method in _METHODS:
            op = item.get(method)
            if not isinstance(op, dict) or not op.get("operationId"):
                continue
            params = [_parameter(_inline(p, document)) for p in [*shared, *op.get("parameters", [])]]
            body = _inline(op.get("requestBody") or {}, document)
            schema = ((body.get("content") or {}).get("application/json") or {}).get("schema")
            found[op["operationId"]] = Operation(
                operation_id=op["operationId"], method=method.upper(), path=path,
                summary=(op.get("summary") or op.get("description") or "").strip(),
                parameters=[p for p in params if p is not None],
                body=_inline(schema, document) if schema is not None else None,
                body_required=bool(body.get("required")),
            )
    return found


def _inline(node: Any, document: dict[str, Any]) -> Any:
    return inline_refs(node, document, too_deep=OpenAPIError)


def _parameter(raw: dict[str, Any]) -> Parameter | None:
    if raw.get("in") not in ("path", "query", "header"):
        return None  # cookies: not ours to send
    return Parameter(name=raw["name"], where=raw["in"], required=bool(raw.get("required") or raw["in"] == "path"),
                     schema_=raw.get("schema") or {"type": "string"}, description=raw.get("description") or "")


class OperationTool(Tool):
    """One OpenAPI operation, called with httpx."""

    def __init__(self, connection: Connection, operation: Operation, base_url: str, policy: RequestPolicy):
        self.connection = connection
        self.operation = operation
        self.base_url = base_url.rstrip("/")
        self.schema = operation.arguments_schema(connection.tenant_parameter)
        self.validator = Draft202012Validator(self.schema)
        description = operation.summary or f"{operation.method} {operation.path}"
        super().__init__(self._call, name=f"{connection.name}_{operation.operation_id}"[:64],
                         description=f"{description} ({connection.name} API: {operation.method} {operation.path})",
                         approval=policy)

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.schema)

    def parse(self, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        data = super().parse(arguments)
        assert isinstance(data, dict)
        problems = [f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}"
                    for e in self.validator.iter_errors(data)]
        if problems:
            raise ValueError("invalid arguments: " + "; ".join(sorted(problems)[:10]))
        return data

    async def _call(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        op, tenant = self.operation, self.connection.tenant_parameter
        values = dict(args)
        if tenant:
            values[tenant] = ctx.tenant or ""  # the session's workspace, whatever the model wrote
        path = op.path
        query: dict[str, Any] = {}
        headers = self._auth_headers()
        for p in op.parameters:
            if p.name not in values:
                continue
            value = values[p.name]
            if p.where == "path":
                path = path.replace("{" + p.name + "}", quote(str(value), safe=""))
            elif p.where == "query":
                query[p.name] = value if not isinstance(value, dict | list) else json.dumps(value)
            else:
                headers[p.name] = str(value)
        async with httpx.AsyncClient(timeout=CALL_TIMEOUT_S) as http:
            try:
                response = await http.request(op.method, self.base_url + path, params=query, headers=headers,
                                              json=values.get("body") if op.body is not None else None)
            except httpx.TimeoutException:
                raise RuntimeError(f"{self.connection.name} did not answer within {CALL_TIMEOUT_S:.0f} s") from None
            except httpx.HTTPError as exc:
                raise RuntimeError(f"{self.connection.name} could not be reached: {exc}") from None
        body = _body(response)
        if response.status_code >= 400:
            raise RuntimeError(f"{self.connection.name} answered {response.status_code}: {json.dumps(body)[:2000]}")
        return {"status": response.status_code, "body": body}

    def _auth_headers(self) -> dict[str, str]:
        auth = self.connection.auth
        if auth is None:
            return {}
        secret = os.environ.get(auth.env)
        if not secret:
            raise RuntimeError(f"the {self.connection.name} API needs {auth.env} set in the bot's environment")
        return {"Authorization": f"Bearer {secret}"} if auth.type == "bearer" else {auth.name: secret}


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:RESULT_CHARS]


def connection_tools(connection: Connection, *, relative_to: Path | None = None) -> list[Tool]:
    """The tools of one connection (raises :class:`OpenAPIError` naming what is missing)."""
    try:
        document = load_document(connection.spec, relative_to=relative_to)
    except (OSError, httpx.HTTPError, yaml.YAMLError) as exc:
        raise OpenAPIError(f"BOT_OPENAPI {connection.name}: cannot load {connection.spec}: {exc}") from exc
    operations = operations_of(document)
    missing = [o for o in connection.operations if o not in operations]
    if missing:
        raise OpenAPIError(f"BOT_OPENAPI {connection.name}: no operation {', '.join(missing)} in {connection.spec}")
    base_url = connection.base_url or ((document.get("servers") or [{}])[0].get("url"))
    if not base_url:
        raise OpenAPIError(f"BOT_OPENAPI {connection.name}: set base_url (the document names no server)")
    tools: list[Tool] = []
    for operation_id in connection.operations:
        operation = operations[operation_id]
        default = "never" if operation.method in ("GET", "HEAD") else "always"
        policy = _POLICIES[connection.approval.get(operation_id, default)]()
        tools.append(OperationTool(connection, operation, base_url, policy))
    return tools


def openapi_tools(config_path: str) -> list[Tool]:
    """Every tool of every connection ``BOT_OPENAPI`` lists."""
    relative_to = Path(config_path).parent
    return [t for c in load_connections(config_path) for t in connection_tools(c, relative_to=relative_to)]
