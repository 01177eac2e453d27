"""Forms as data (DESIGN §12): a pydantic model ⇄ the flat JSON schema a parked request carries.

A form a tool asks for (``ctx.form``), that the model asks for (``request_info``) or, later, that an MCP
server elicits is stored with its request as a JSON schema, so that any replica — with or without the
code that asked — can show it and check what people submit. The schema is the subset Slack's inputs
can show: a flat object whose properties are strings (plain, ``date``, ``date-time``), integers and
numbers with bounds, booleans, enums, arrays of enums, and any of these or null.

:func:`model_from_schema` rebuilds a pydantic model from such a schema (the one form generator in
``blocks.forms`` works on models); :func:`form_schema` is the other way, and refuses, by field name,
what the subset cannot hold.
"""

from __future__ import annotations

import keyword
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from bot.schema_refs import inline_refs

MAX_FIELDS = 20  # our cap: a form longer than this is a page, not a question
MAX_NAME = 64  # characters of a property name (it becomes part of a block id)
_BOUNDS = {"minimum": "ge", "maximum": "le", "exclusiveMinimum": "gt", "exclusiveMaximum": "lt"}
_LENGTHS = {"minLength": "min_length", "maxLength": "max_length"}
_DESCRIBING = ("title", "description", "default")


class FormSchemaError(ValueError):
    """A form that cannot be shown; the message names the field and what is wrong with it."""


def form_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema, references inlined, checked to rebuild (raises :class:`FormSchemaError`)."""
    raw = model.model_json_schema()
    schema = inline_refs(raw, raw, too_deep=FormSchemaError)
    schema.pop("$defs", None)
    titled = {_schema_key(name, info.validation_alias, info.alias) for name, info in model.model_fields.items()
              if info.title}
    for key, prop in (schema.get("properties") or {}).items():
        if key not in titled:  # pydantic's made-up "Charge Id": the form labels an untitled field itself
            prop.pop("title", None)
    model_from_schema(schema)
    return schema


def _schema_key(name: str, validation_alias: Any, alias: str | None) -> str:
    return validation_alias if isinstance(validation_alias, str) else alias or name


def model_from_schema(schema: dict[str, Any], *, name: str = "Form") -> type[BaseModel]:
    """A pydantic model that validates what the schema describes (raises :class:`FormSchemaError`)."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise FormSchemaError("a form is a JSON object schema")
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise FormSchemaError("a form needs at least one field (its schema's properties)")
    if len(properties) > MAX_FIELDS:
        raise FormSchemaError(f"a form has at most {MAX_FIELDS} fields, not {len(properties)}")
    listed = schema.get("required") or []
    if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
        raise FormSchemaError("a form's `required` is a list of field names")
    required = set(listed)
    taken: set[str] = set()
    fields: dict[str, Any] = {}
    for index, (prop_name, prop) in enumerate(properties.items()):
        if not isinstance(prop_name, str) or not 0 < len(prop_name) <= MAX_NAME:
            raise FormSchemaError(f"field names are 1 to {MAX_NAME} characters: {str(prop_name)[:80]!r}")
        if not isinstance(prop, dict):
            raise FormSchemaError(f"field {prop_name!r}: its schema must be an object")
        annotation, constraints = _annotation(prop_name, prop)
        field_name = _python_name(prop_name, index, taken)
        taken.add(field_name)
        info: dict[str, Any] = {**constraints, "title": prop.get("title"), "description": prop.get("description")}
        if field_name != prop_name:
            info["alias"] = prop_name
        if prop.get("multiline"):
            info["json_schema_extra"] = {"multiline": True}
        if prop_name not in required:
            info["default"] = prop.get("default")
            if info["default"] is None:  # left empty, it is None: the type must say so (defaults aren't validated)
                annotation = annotation | None
        fields[field_name] = (annotation, Field(**{k: v for k, v in info.items() if v is not None or k == "default"}))
    config = ConfigDict(extra="ignore", populate_by_name=False)
    if isinstance(schema.get("title"), str) and schema["title"].strip():  # what the form is for, kept on the way back
        config["title"] = schema["title"].strip()
    try:
        return create_model(name, __config__=config, **fields)
    except Exception as exc:  # noqa: BLE001 - a schema pydantic cannot build is a schema we cannot show
        raise FormSchemaError(f"the form cannot be built: {exc}") from exc


def checked_values(schema: dict[str, Any], values: Any) -> dict[str, Any]:
    """``values`` validated against the form, as JSON data keyed by the schema's names (raises ValueError)."""
    model = model_from_schema(schema)
    if not isinstance(values, dict):
        raise ValueError("a form's values are a JSON object")
    try:
        return model.model_validate(values).model_dump(mode="json", by_alias=True)
    except ValidationError as exc:
        raise ValueError(f"the form's values are not valid: {_problems(exc, 'form')}") from exc


def validated_result(model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as the tool's own result model takes them (raises ValueError naming each field).

    The form's JSON schema cannot carry a model's ``field_validator``/``model_validator`` rules, so an
    external result passes the model itself before it settles: what the turn gets, the model accepted."""
    try:
        return model.model_validate(values).model_dump(mode="json", by_alias=True)
    except ValidationError as exc:
        raise ValueError(f"the result is not valid: {_problems(exc, 'result')}") from exc


def _problems(exc: ValidationError, whole: str) -> str:
    """Each error as ``field: message`` (the field from its loc; ``whole`` when a rule is about all of it)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or whole}: {e['msg']}" for e in exc.errors())


def _annotation(name: str, prop: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The Python type and the ``Field`` constraints of one property."""
    if "anyOf" in prop or "oneOf" in prop:
        return _union(name, prop)
    if "enum" in prop or "const" in prop:
        return _literal(name, prop.get("enum", [prop.get("const")])), {}
    kind = prop.get("type")
    if kind == "string":
        formats = {"date": date, "date-time": datetime}
        return formats.get(prop.get("format", ""), str), _picked(prop, _LENGTHS)
    if kind == "integer":
        return int, _picked(prop, _BOUNDS)
    if kind == "number":
        return float, _picked(prop, _BOUNDS)
    if kind == "boolean":
        return bool, {}
    if kind == "array":
        items = prop.get("items")
        if isinstance(items, dict) and ("enum" in items or "anyOf" in items):
            element, _ = _annotation(name, items)
            return list[element], {}  # type: ignore[valid-type]
        raise FormSchemaError(f"field {name!r}: a list is shown as a multi-select, so its items need an enum")
    raise FormSchemaError(f"field {name!r}: {kind or 'this kind of value'!s} can't be shown as a form input")


def _union(name: str, prop: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    branches = [b for b in prop.get("anyOf") or prop.get("oneOf") or [] if isinstance(b, dict)]
    values = [b for b in branches if b.get("type") != "null"]
    nullable = len(values) < len(branches)
    kinds = sorted(b.get("type", "") for b in values)
    if kinds == ["number", "string"] and all(set(b) <= {"type", "pattern", *_BOUNDS} for b in values):
        # how pydantic writes a Decimal: a number, or a string of one
        number = next(b for b in values if b.get("type") == "number")
        annotation: Any = Decimal
        constraints = _picked(number, _BOUNDS)
    elif len(values) == 1:
        annotation, constraints = _annotation(name, {**values[0], **{k: prop[k] for k in _DESCRIBING if k in prop}})
    elif values and all("enum" in b or "const" in b for b in values):
        annotation = _literal(name, [v for b in values for v in b.get("enum", [b.get("const")])])
        constraints = {}
    else:
        raise FormSchemaError(f"field {name!r}: a choice between several kinds of value can't be one input")
    return (annotation | None if nullable else annotation), constraints


def _literal(name: str, values: list[Any]) -> Any:
    if not values or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in values):
        raise FormSchemaError(f"field {name!r}: its choices must be strings or whole numbers")
    if len(set(values)) != len(values):
        raise FormSchemaError(f"field {name!r}: its choices repeat")
    return Literal[tuple(values)]


def _picked(prop: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    picked = {}
    for schema_name, field_name in names.items():
        value = prop.get(schema_name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FormSchemaError(f"{schema_name} must be a number, not {value!r}")
            picked[field_name] = value
    return picked


def _python_name(prop_name: str, index: int, taken: set[str]) -> str:
    """The property's name when Python and pydantic accept it as a field name, else a stand-in (the
    property name stays its alias, so values keep the schema's names)."""
    usable = (prop_name.isidentifier() and not keyword.iskeyword(prop_name) and not prop_name.startswith("_")
              and not hasattr(BaseModel, prop_name) and prop_name not in taken)
    return prop_name if usable else f"field_{index}"
