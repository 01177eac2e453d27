"""OpenAPI operations as tools (DESIGN §6): an OpenAPI 3 document plus the operation ids to offer.

Each operation becomes a tool of the registry, under the same policies as any tool: its arguments are
the operation's path, query, header and cookie parameters plus ``body`` (its JSON request body),
described to the model with their JSON schemas and validated against them (``jsonschema``) before any
policy runs. GET and HEAD run without asking (``never()``); every other method asks (``always()``); the
connection's ``approval`` map overrides either per operation. Tool names are ``<connection>_<operationId>``
made valid for model APIs (:func:`bot.connections.tool_names.model_safe_name`, as MCP's are).

Only the configured operations are resolved (a ``$ref`` that recurses stays a ``$ref`` into the tool's
``$defs``), so GitHub's 13 MB description loads in well under a second. OpenAPI 3.0's ``nullable`` becomes
a ``"null"`` type; query parameters are sent as their ``style``/``explode`` say (``tags=a&tags=b`` by default).

The tenant rule holds: a ``tenant_parameter`` is filled from the session's workspace wherever it is (path,
query, header, cookie, and the JSON body at any depth) and is not an argument at all (the model is not told
of it, and an argument of that name is refused); a body where it can't be pinned (inside an array) stops the
connection from loading. A path parameter is always one opaque segment (``.``, ``..`` and empty values are
refused, and the URL the client sends is checked against the template). Credentials come from the
environment when a call is made (``auth``), never from the document or the model: a parameter in the
credential's place is not offered, the credential is applied last, and it is redacted (as the logs redact
it) from whatever the API answers, before the model or a log line sees it.

Connections are listed in the file ``BOT_OPENAPI`` names (JSON or YAML)::

    connections:
      - name: crm
        spec: ./crm.openapi.yaml        # a file, or an http(s) URL
        base_url: https://crm.example.com/api   # default: the document's first server
        operations: [getCustomer, createNote]
        auth: {type: bearer, env: CRM_TOKEN}    # or {type: header|query|cookie, name: X-Api-Key, env: CRM_KEY}
        tenant_parameter: workspace
        approval: {getCustomer: always}         # never | always | once
        preview: {createNote: getCustomer}      # a GET whose answer is the card's preview (``@tool(preview=…)``)
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote

import httpx
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import AfterValidator, Field

from bot.approval import RequestPolicy, check_policy_name, never, policy_named
from bot.connections.openapi_documents import OpenAPIError, load_document, server_url
from bot.connections.schema_tools import SchemaTool
from bot.connections.tool_names import model_safe_name
from bot.deferred import DeferredModel
from bot.ops import logs
from bot.schema_refs import RefBundle
from bot.tools import Tool, ToolContext

CALL_TIMEOUT_S = 30.0
RESULT_CHARS = 20_000  # of a response body handed to the model
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_TEMPLATE = re.compile(r"\{([^{}]+)\}")
Where = Literal["path", "query", "header", "cookie"]


class Auth(DeferredModel):
    type: Literal["bearer", "header", "query", "cookie"]
    env: str  # the environment variable holding the secret
    name: str = "Authorization"  # the header (query parameter, cookie), for the types but bearer

    def slot(self) -> tuple[str, str]:
        """Where the secret goes, as a parameter's (in, name) compares: header names ignore case."""
        if self.type == "bearer":
            return ("header", "authorization")
        return (self.type, self.name.lower() if self.type == "header" else self.name)


class Connection(DeferredModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,30}$")
    spec: str
    base_url: str | None = None
    operations: list[str] = Field(min_length=1)
    auth: Auth | None = None
    tenant_parameter: str | None = None
    approval: dict[str, Annotated[str, AfterValidator(check_policy_name)]] = Field(default_factory=dict)
    # a card's preview (``@tool(preview=…)``): operation → a GET operation of the same document, called
    # with the arguments it takes from the proposed call ({deletePet: getPetById}); need not be offered
    preview: dict[str, str] = Field(default_factory=dict)


class Parameter(DeferredModel):
    name: str
    where: Where
    required: bool = False
    schema_: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    style: str = ""  # OpenAPI's default for where it is when empty: form (query, cookie), simple (path, header)
    explode: bool | None = None  # default: true for form, false otherwise
    as_json: bool = False  # described by ``content: {application/json: …}``: sent as JSON text

    def slot(self) -> tuple[str, str]:
        return (self.where, self.name.lower() if self.where == "header" else self.name)


class TenantSlot(DeferredModel):
    """Where in the JSON body the tenant goes: the keys down to it, and whether missing objects on the
    way are made (only when each was required, so an optional object is not sent half-filled)."""

    keys: tuple[str, ...]
    make_parents: bool


class Operation(DeferredModel):
    operation_id: str
    method: str
    path: str
    summary: str = ""
    parameters: list[Parameter] = Field(default_factory=list)
    body: dict[str, Any] | None = None  # the JSON request body's schema
    body_required: bool = False
    defs: dict[str, Any] = Field(default_factory=dict)  # recursive schemas, referred to as #/$defs/<name>
    body_tenant: list[TenantSlot] = Field(default_factory=list)

    def arguments_schema(self, tenant_parameter: str | None, hidden: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
        """The arguments the model may give: never the tenant, never a configured credential (``hidden``
        slots), and no other key (``additionalProperties: false``)."""
        hidden = set(hidden)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for p in self.parameters:
            if p.name == tenant_parameter or p.slot() in hidden:
                continue  # filled from the session or the environment, never by the model
            properties[p.name] = {**p.schema_, **({"description": p.description} if p.description else {})}
            if p.required:
                required.append(p.name)
        if self.body is not None:
            properties["body"] = self.body
            if self.body_required:
                required.append("body")
        schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required,
                                  "additionalProperties": False}
        return {**schema, "$defs": self.defs} if self.defs else schema


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


def operations_of(document: dict[str, Any], wanted: Iterable[str] | None = None) -> dict[str, Operation]:
    """The operations ``wanted`` (default: all) by operation id, their ``$ref``s resolved. Only those
    are resolved: a large document (GitHub's has ~1,000 operations) costs what its configured ones do."""
    index = _index(document)
    ids = list(index) if wanted is None else [w for w in wanted if w in index]
    return {op_id: _operation(document, op_id, *index[op_id]) for op_id in ids}


def _index(document: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """Where each operation is (path, method, path item, operation), nothing resolved."""
    found: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {}
    for path, item in (document.get("paths") or {}).items():
        if not isinstance(item, dict):
            continue
        for method in _METHODS:
            op = item.get(method)
            if isinstance(op, dict) and op.get("operationId"):
                found[op["operationId"]] = (path, method, item, op)
    return found


def _operation(document: dict[str, Any], op_id: str, path: str, method: str, item: dict[str, Any],
               op: dict[str, Any]) -> Operation:
    refs = RefBundle(document, error=OpenAPIError)
    params: dict[tuple[str, str], Parameter] = {}
    for raw in [*item.get("parameters", []), *op.get("parameters", [])]:  # the operation's win over the path's
        parameter = _parameter(refs.inline(raw))
        if parameter is not None:
            params[(parameter.where, parameter.name)] = parameter
    body = refs.inline(op.get("requestBody") or {})
    schema = _json_media(body.get("content") or {})
    defs = {name: _json_schema(d) for name, d in refs.defs.items()}
    return Operation(operation_id=op_id, method=method.upper(), path=path,
                     summary=(op.get("summary") or op.get("description") or "").strip(),
                     parameters=list(params.values()), defs=defs,
                     body=_json_schema(schema) if schema is not None else None,
                     body_required=bool(body.get("required")))


def _json_media(content: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of the JSON media type of a ``content`` map (``application/json``, ``…+json``)."""
    for media, entry in content.items():
        kind = media.split(";")[0].strip().lower()
        if (kind == "application/json" or kind.endswith("+json")) and isinstance(entry, dict):
            return entry.get("schema") or {}
    return None


def _parameter(raw: dict[str, Any]) -> Parameter | None:
    if raw.get("in") not in ("path", "query", "header", "cookie") or not raw.get("name"):
        return None
    schema, as_json = raw.get("schema"), False
    if schema is None and isinstance(raw.get("content"), dict):
        schema, as_json = _json_media(raw["content"]), True
    return Parameter(name=raw["name"], where=raw["in"], required=bool(raw.get("required") or raw["in"] == "path"),
                     schema_=_json_schema(schema or {"type": "string"}), description=raw.get("description") or "",
                     style=raw.get("style") or "", explode=raw.get("explode"), as_json=as_json)


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
               "unevaluatedProperties", "unevaluatedItems")


def _json_schema(schema: Any) -> Any:
    """An OpenAPI 3.0 schema as the JSON Schema the validator and the model read: ``nullable: true``
    becomes a ``"null"`` type (so a field can be cleared), 3.0's boolean ``exclusiveMinimum``/``Maximum``
    become 2020-12's numbers. Only schema keywords are walked: a property may be called "nullable"."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _json_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_json_schema(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = _json_schema(value)
        else:
            out[key] = value
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(exclusive), bool):
            if out.pop(exclusive) and bound in out:
                out[exclusive] = out.pop(bound)
    if out.pop("nullable", None) is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif isinstance(kind, list) and "null" not in kind:
            out["type"] = [*kind, "null"]
        elif kind is None:
            out = {"anyOf": [out, {"type": "null"}]}
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def _pin_tenant(schema: Any, name: str, at: tuple[str, ...] = (), make: bool = True) -> tuple[Any, list[TenantSlot]]:
    """The body schema without the tenant property wherever it is, and where it goes. Raises
    :class:`OpenAPIError` where it can't be pinned (inside an array or a map of any keys)."""
    if not isinstance(schema, dict):
        return schema, []
    schema, slots = dict(schema), []
    properties = schema.get("properties")
    if isinstance(properties, dict):
        properties, required = dict(properties), schema.get("required") or []
        if name in properties:
            del properties[name]
            slots.append(TenantSlot(keys=(*at, name), make_parents=make))
            schema["required"] = [r for r in required if r != name]
        for key, sub in list(properties.items()):
            properties[key], found = _pin_tenant(sub, name, (*at, key), make and key in required)
            slots += found
        schema["properties"] = properties
    for key in ("allOf", "anyOf", "oneOf"):  # each branch describes the same object
        if isinstance(schema.get(key), list):
            pinned = [_pin_tenant(branch, name, at, make) for branch in schema[key]]
            schema[key] = [branch for branch, _ in pinned]
            slots += [slot for _, found in pinned for slot in found]
    for key, shown in (("items", "[]"), ("prefixItems", "[]"), ("additionalProperties", ".*"),
                       ("patternProperties", ".*"), ("not", " (not)"), ("if", " (if)"), ("then", " (then)"),
                       ("else", " (else)")):
        if key in schema and _mentions(schema[key], name):
            raise OpenAPIError(f"the tenant parameter {name!r} is at {'.'.join(('body', *at))}{shown} in the "
                               "request body, where it can't be filled in from the session; leave the operation "
                               "out or set tenant_parameter to another name")
    return schema, slots


def _mentions(node: Any, name: str) -> bool:
    if isinstance(node, list):
        return any(_mentions(n, name) for n in node)
    if not isinstance(node, dict):
        return False
    if isinstance(node.get("properties"), dict) and name in node["properties"]:
        return True
    return any(_mentions(v, name) for v in node.values() if isinstance(v, dict | list))


class OperationTool(SchemaTool):
    """One OpenAPI operation, called with httpx."""

    def __init__(self, connection: Connection, operation: Operation, base_url: str, policy: RequestPolicy,
                 preview: OperationTool | None = None):
        self.connection = connection
        self.operation = operation
        self.base_url = base_url.rstrip("/")
        self.credential = connection.auth.slot() if connection.auth else None
        schema = operation.arguments_schema(connection.tenant_parameter, [self.credential] if self.credential else [])
        description = operation.summary or f"{operation.method} {operation.path}"
        super().__init__(self._call, schema, name=tool_name(connection.name, operation.operation_id),
                         description=f"{description} ({connection.name} API: {operation.method} {operation.path})",
                         approval=policy, preview=preview.answer_as_preview if preview else None)

    def parse(self, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        data = super().parse(arguments)  # checked against the operation's schema
        for p in self.operation.parameters:  # refused before any policy, like any invalid argument
            if p.where == "path" and p.name in data and _simple(p, data[p.name]) in ("", ".", ".."):
                raise ValueError(f"invalid arguments: path parameter {p.name!r} can't be "
                                 f"{_simple(p, data[p.name])!r}: it must name one thing")
        tenant = self.connection.tenant_parameter
        stray = _stray(data.get("body"), tenant, {s.keys for s in self.operation.body_tenant}) if tenant else None
        if stray:
            raise ValueError(f"invalid arguments: {'.'.join(('body', *stray))}: {tenant!r} is the workspace, "
                             "filled in from the session; leave it out")
        return data

    async def _call(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        op, tenant = self.operation, self.connection.tenant_parameter
        values = dict(args)
        if tenant:
            if not ctx.tenant:  # fail closed: a per-workspace API is never called for no workspace
                raise RuntimeError(f"the {self.connection.name} API is per workspace, and this session has none")
            values[tenant] = ctx.tenant  # the session's workspace, whatever the model wrote
        path = self._path(values)
        query: list[tuple[str, str]] = []
        headers: dict[str, str] = {}
        cookies: list[tuple[str, str]] = []
        for p in op.parameters:
            if p.name not in values or values[p.name] is None or p.slot() == self.credential:
                continue
            if p.where == "query":
                query += _query_pairs(p, values[p.name])
            elif p.where == "header":
                headers[p.name] = _simple(p, values[p.name])
            elif p.where == "cookie":
                cookies.append((p.name, _simple(p, values[p.name])))
        self._authorise(query, headers, cookies)  # last: configured credentials always win
        if cookies:
            headers["Cookie"] = "; ".join(f"{k}={quote(v, safe='')}" for k, v in cookies)
        body = self._body(values) if op.body is not None else None
        async with httpx.AsyncClient(timeout=CALL_TIMEOUT_S) as http:
            request = http.build_request(op.method, self.base_url + path, params=query, headers=headers,
                                         json=body)
            self._check_path(request.url, path)
            try:
                response = await http.send(request)
            except httpx.TimeoutException:
                raise RuntimeError(f"{self.connection.name} did not answer within {CALL_TIMEOUT_S:.0f} s") from None
            except httpx.HTTPError as exc:
                raise RuntimeError(logs.redact(f"{self.connection.name} could not be reached: {exc}")) from None
        # an API may quote the credential back (in an error, say): the model and the logs never see it
        result = logs.redact_value(_response_body(response))
        if response.status_code >= 400:
            raise RuntimeError(f"{self.connection.name} answered {response.status_code}: {json.dumps(result)[:2000]}")
        return {"status": response.status_code, "body": result}

    async def answer_as_preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """This (GET) operation's answer to the arguments of another's proposed call that it takes, as the
        card's preview: called like any call (the session's tenant, the configured credential, redacted)."""
        taken = {k: v for k, v in args.items() if k in self.schema["properties"]}
        result = await self._call(self.parse(taken), ctx)
        return json.dumps(result["body"], default=str)

    def _path(self, values: dict[str, Any]) -> str:
        """The operation's path with each parameter as one opaque segment: a value that is empty, ``.`` or
        ``..`` is refused (HTTP clients and servers drop dot segments, climbing out of the template)."""
        def segment(match: re.Match[str]) -> str:
            name = match.group(1)
            parameter = next((p for p in self.operation.parameters if p.where == "path" and p.name == name), None)
            text = _simple(parameter, values.get(name)) if parameter is not None and name in values else ""
            if text in ("", ".", ".."):
                raise ValueError(f"path parameter {name!r} can't be {text!r}: it must name one thing")
            return quote(text, safe="")

        return _TEMPLATE.sub(segment, self.operation.path)

    def _check_path(self, url: httpx.URL, path: str) -> None:
        """The URL the client will send still has the path we built, segment for segment."""
        sent = url.raw_path.decode("ascii").split("?", 1)[0]
        expected = httpx.URL(self.base_url).raw_path.decode("ascii").split("?", 1)[0].rstrip("/") + path
        if sent != expected or any(s in (".", "..") for s in sent.split("/")):
            raise ValueError(f"the {self.connection.name} URL would not match {self.operation.path}; not called")

    def _body(self, values: dict[str, Any]) -> Any:
        body, tenant = values.get("body"), self.connection.tenant_parameter
        if not tenant or not isinstance(body, dict):
            return body
        body = copy.deepcopy(body)
        for slot in self.operation.body_tenant:
            parent: Any = body
            for key in slot.keys[:-1]:
                if isinstance(parent, dict) and key not in parent and slot.make_parents:
                    parent[key] = {}
                parent = parent.get(key) if isinstance(parent, dict) else None
            if isinstance(parent, dict):
                parent[slot.keys[-1]] = values[tenant]
        stray = _stray(body, tenant, {s.keys for s in self.operation.body_tenant})
        if stray:
            raise ValueError(f"{'.'.join(('body', *stray))}: {tenant!r} is the workspace, filled in from the "
                             "session; leave it out")
        return body

    def _authorise(self, query: list[tuple[str, str]], headers: dict[str, str],
                   cookies: list[tuple[str, str]]) -> None:
        auth = self.connection.auth
        if auth is None:
            return
        secret = os.environ.get(auth.env)
        if not secret:
            raise RuntimeError(f"the {self.connection.name} API needs {auth.env} set in the bot's environment")
        logs.add_secrets(secret)
        if auth.type == "bearer":
            headers["Authorization"] = f"Bearer {secret}"
        elif auth.type == "header":
            headers[auth.name] = secret
        elif auth.type == "query":
            query[:] = [(k, v) for k, v in query if k != auth.name] + [(auth.name, secret)]
        else:
            cookies[:] = [(k, v) for k, v in cookies if k != auth.name] + [(auth.name, secret)]


def tool_name(connection: str, operation_id: str) -> str:
    """``<connection>_<operationId>``, made valid for model APIs (GitHub's ids are ``repos/get``)."""
    return model_safe_name(f"{connection}_{operation_id}", identity=f"{connection}.{operation_id}")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _simple(parameter: Parameter, value: Any) -> str:
    """A path, header or cookie value, OpenAPI's ``simple`` style: lists and objects comma-separated."""
    if parameter.as_json:
        return json.dumps(value)
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    if isinstance(value, dict):
        joiner = "=" if parameter.explode else ","
        return ",".join(f"{k}{joiner}{_text(v)}" for k, v in value.items())
    return _text(value)


def _query_pairs(parameter: Parameter, value: Any) -> list[tuple[str, str]]:
    """A query parameter as OpenAPI's ``style``/``explode`` say (default form, exploded): an array is
    ``tags=a&tags=b``, or ``a,b``, ``a b``, ``a|b``; an object its properties, or ``obj[key]=…``."""
    name, style = parameter.name, parameter.style or "form"
    explode = parameter.explode if parameter.explode is not None else style == "form"
    if parameter.as_json:
        return [(name, json.dumps(value))]
    if isinstance(value, list):
        if style == "form" and explode:
            return [(name, _text(v)) for v in value]
        joiner = {"spaceDelimited": " ", "pipeDelimited": "|"}.get(style, ",")
        return [(name, joiner.join(_text(v) for v in value))]
    if isinstance(value, dict):
        if style == "deepObject":
            return [(f"{name}[{k}]", _text(v)) for k, v in value.items() if v is not None]
        if explode:
            return [(k, _text(v)) for k, v in value.items() if v is not None]
        return [(name, ",".join(f"{k},{_text(v)}" for k, v in value.items() if v is not None))]
    return [(name, _text(value))]


def _stray(node: Any, name: str, pinned: set[tuple[str, ...]], at: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Where ``name`` is a key in the body other than where the tenant was pinned, if anywhere."""
    if isinstance(node, dict):
        if name in node and (*at, name) not in pinned:
            return (*at, name)
        for key, value in node.items():
            found = _stray(value, name, pinned, (*at, str(key)))
            if found:
                return found
    elif isinstance(node, list):
        for value in node:
            found = _stray(value, name, pinned, (*at, "[]"))
            if found:
                return found
    return None


def _response_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:RESULT_CHARS]


def connection_tools(connection: Connection, *, relative_to: Path | None = None) -> list[Tool]:
    """The tools of one connection (raises :class:`OpenAPIError` naming the connection, the file and
    the operation, and what is wrong)."""
    where = f"BOT_OPENAPI {connection.name}: {connection.spec}"
    try:
        document = load_document(connection.spec, relative_to=relative_to)
    except (OSError, httpx.HTTPError, yaml.YAMLError) as exc:
        raise OpenAPIError(f"BOT_OPENAPI {connection.name}: cannot load {connection.spec}: {exc}") from exc
    except OpenAPIError as exc:
        raise OpenAPIError(f"BOT_OPENAPI {connection.name}: {exc}") from exc
    index = _index(document)
    missing = [o for o in connection.operations if o not in index]
    if missing:
        raise OpenAPIError(f"BOT_OPENAPI {connection.name}: no operation {', '.join(missing)} in {connection.spec}")
    unoffered = [o for o in connection.preview if o not in connection.operations]
    if unoffered:
        raise OpenAPIError(f"BOT_OPENAPI {connection.name}: preview of {', '.join(unoffered)}: not in operations")
    base_url = server_url(connection.name, connection.spec, connection.base_url, document)
    if connection.auth is not None:
        logs.add_secrets(os.environ.get(connection.auth.env))
    tools: list[Tool] = []
    for operation_id in connection.operations:
        try:
            operation = _operation(document, operation_id, *index[operation_id])
            if connection.tenant_parameter and operation.body is not None:
                body, slots = _pin_tenant(operation.body, connection.tenant_parameter)
                if any(_mentions(d, connection.tenant_parameter) for d in operation.defs.values()):
                    raise OpenAPIError(f"the tenant parameter {connection.tenant_parameter!r} is inside a "
                                       "recursive schema of the request body, where it can't be filled in")
                operation = operation.model_copy(update={"body": body, "body_tenant": slots})
            default = "never" if operation.method in ("GET", "HEAD") else "always"
            policy = policy_named(connection.approval.get(operation_id, default))
            preview = _preview_tool(connection, document, index, operation_id, base_url)
            tool = OperationTool(connection, operation, base_url, policy, preview)
            Draft202012Validator.check_schema(tool.schema)
        except OpenAPIError as exc:
            raise OpenAPIError(f"{where}, operation {operation_id}: {exc}") from None
        except SchemaError as exc:
            raise OpenAPIError(f"{where}, operation {operation_id}: not a valid JSON schema: {exc.message}") from None
        tools.append(tool)
    return tools


def _preview_tool(connection: Connection, document: dict[str, Any],
                  index: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]], operation_id: str,
                  base_url: str) -> OperationTool | None:
    """The GET operation configured as ``operation_id``'s preview, as a tool the model is never offered.
    Only GET or HEAD: a preview runs before anyone approves, so it must only read."""
    name = connection.preview.get(operation_id)
    if name is None:
        return None
    if name not in index:
        raise OpenAPIError(f"preview of {operation_id}: no operation {name}")
    operation = _operation(document, name, *index[name])
    if operation.method not in ("GET", "HEAD"):
        raise OpenAPIError(f"preview of {operation_id}: {name} is {operation.method}; a preview must be a GET operation")
    if operation.body is not None:  # (where a tenant inside it could not be pinned as the operations' are)
        raise OpenAPIError(f"preview of {operation_id}: {name} takes a request body; a preview must not")
    return OperationTool(connection, operation, base_url, never())


def openapi_tools(config_path: str) -> list[Tool]:
    """Every tool of every connection ``BOT_OPENAPI`` lists."""
    relative_to = Path(config_path).parent
    return [t for c in load_connections(config_path) for t in connection_tools(c, relative_to=relative_to)]
