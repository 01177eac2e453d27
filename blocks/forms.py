"""The one form generator (DESIGN §12): a pydantic model ↔ Block Kit ``input`` blocks ↔ ``view.state.values``.

Used by "Edit & approve" (a tool's arguments) and meant for forms, external results and elicitation
alike. One input block per field, ``block_id = <prefix><field name>``, ``action_id = "value"``:

=====================================  ===========================  =================================
field type                             element                      state Slack sends back
=====================================  ===========================  =================================
``str``                                ``plain_text_input``         ``value`` (multiline when long)
``int`` / ``float`` / ``Decimal``      ``number_input``             ``value`` as a string
``bool``                               ``checkboxes`` (one option)  ``selected_options``
``bool | None``                        ``static_select`` Yes / No   ``selected_option``
``Literal[…]`` / ``Enum``              ``static_select``            ``selected_option``
``list[Literal]`` / ``list[Enum]``     ``multi_static_select``      ``selected_options``
``date``                               ``datepicker``               ``selected_date`` (YYYY-MM-DD)
``datetime``                           ``datetimepicker``           ``selected_date_time`` (epoch s)
=====================================  ===========================  =================================

``X | None`` is X, optional. Anything else raises :class:`FormUnsupported` (call
:func:`check_form_model` when a tool is registered). Validation is pydantic's; its errors come back
keyed by block id, the shape of Slack's ``response_action: errors``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from slack_sdk.models.blocks import (
    CheckboxesElement,
    DatePickerElement,
    DateTimePickerElement,
    InputBlock,
    NumberInputElement,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    StaticMultiSelectElement,
    StaticSelectElement,
)

from blocks.limits import INPUT_HINT, OPTION_TEXT, OPTION_VALUE, PLAIN_TEXT_INPUT, SELECT_OPTIONS, truncate

VALUE_ACTION_ID = "value"
DEFAULT_PREFIX = "form:"
LONG_TEXT = 150  # a string field allowed (or holding) more than this gets a multiline input
ERROR_TEXT = 150  # keep inline errors short: they show under one field
CHECKED = "true"  # the value of a bool field's one checkbox

Kind = Literal["text", "number", "bool", "choice", "choices", "date", "datetime"]


class FormUnsupported(TypeError):
    """A field no Slack input can show; the message names the field and its type."""


class _Field:
    """How one model field is shown and read back."""

    def __init__(self, name: str, info: FieldInfo):
        self.name = name
        self.info = info
        annotation, self.optional = _unwrap_optional(info.annotation)
        self.kind, self.base, self.choices = _classify(name, annotation)
        if self.kind == "bool" and self.optional:  # a checkbox has no "not set": Yes / No / nothing chosen
            self.kind, self.choices = "choice", [True, False]
        self.optional = self.optional or not info.is_required() or self.kind == "bool"

    def label(self) -> str:
        return self.info.title or self.name.replace("_", " ").strip().capitalize() or self.name

    def bound(self, kind: str) -> Any:
        for meta in self.info.metadata:
            value = getattr(meta, kind, None)
            if value is not None:
                return value
        return None


def check_form_model(model: type[BaseModel]) -> None:
    """Raise :class:`FormUnsupported` unless every field of ``model`` has a Slack input."""
    _fields(model)


def _fields(model: type[BaseModel]) -> list[_Field]:
    return [_Field(name, info) for name, info in model.model_fields.items()]


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _literal_values(annotation: Any) -> list[Any] | None:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return [member for member in annotation]
    return None


def _classify(name: str, annotation: Any) -> tuple[Kind, Any, list[Any]]:
    annotation = _strip_annotated(annotation)
    choices = _literal_values(annotation)
    if choices is not None:
        return _checked_choices(name, annotation, "choice", choices)
    if get_origin(annotation) in (list, typing.List):  # noqa: UP006 - typing.List still appears in user code
        [item] = get_args(annotation) or [Any]
        item_choices = _literal_values(_strip_annotated(item))
        if item_choices is not None:
            return _checked_choices(name, annotation, "choices", item_choices)
    if annotation is bool:
        return "bool", bool, []
    if annotation in (int, float, Decimal):
        return "number", annotation, []
    if annotation is str:
        return "text", str, []
    if annotation is datetime:
        return "datetime", datetime, []
    if annotation is date:
        return "date", date, []
    raise FormUnsupported(f"field {name!r} ({_type_name(annotation)}) cannot be shown as a Slack form input")


def _strip_annotated(annotation: Any) -> Any:
    return get_args(annotation)[0] if get_origin(annotation) is typing.Annotated else annotation


def _checked_choices(name: str, annotation: Any, kind: Kind, choices: list[Any]) -> tuple[Kind, Any, list[Any]]:
    if not choices or len(choices) > SELECT_OPTIONS:
        raise FormUnsupported(f"field {name!r} has {len(choices)} choices; a Slack menu holds 1 to {SELECT_OPTIONS}")
    if any(len(_choice_value(c)) > OPTION_VALUE for c in choices):
        raise FormUnsupported(f"field {name!r} has a choice longer than Slack's {OPTION_VALUE} characters")
    return kind, annotation, choices


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _choice_value(choice: Any) -> str:
    return str(choice.value if isinstance(choice, Enum) else choice)


def _option(choice: Any) -> Option:
    value = _choice_value(choice)
    label = ("Yes" if choice else "No") if isinstance(choice, bool) else value
    return Option(value=value, text=PlainTextObject(text=truncate(label, OPTION_TEXT)))


# --- model → blocks ------------------------------------------------------------------------------


def form_values(instance: BaseModel) -> dict[str, Any]:
    """What to prefill a form from."""
    return instance.model_dump(mode="python")


def form_blocks(model: type[BaseModel], values: Mapping[str, Any] | None = None, *,
                block_prefix: str = DEFAULT_PREFIX) -> list[dict]:
    """One ``input`` block per field, in field order, prefilled from ``values`` (else the field's default)."""
    blocks = []
    for field in _fields(model):
        value = (values or {}).get(field.name, _default(field))
        hint = field.info.description
        block = InputBlock(
            block_id=f"{block_prefix}{field.name}",
            label=PlainTextObject(text=truncate(field.label(), 2000)),
            element=_element(field, value),
            optional=field.optional,
            hint=PlainTextObject(text=truncate(hint, INPUT_HINT)) if hint else None,
        )
        blocks.append(block.to_dict())
    return blocks


def _default(field: _Field) -> Any:
    if field.info.is_required():
        return None
    return field.info.get_default(call_default_factory=True)


def _element(field: _Field, value: Any) -> Any:
    kind = field.kind
    if kind == "text":
        return _text_element(field, value)
    if kind == "number":
        return _number_element(field, value)
    if kind == "bool":
        option = Option(value=CHECKED, text=PlainTextObject(text=truncate(field.label(), OPTION_TEXT)))
        return CheckboxesElement(action_id=VALUE_ACTION_ID, options=[option],
                                 initial_options=[option] if value is True else None)
    if kind == "choice":
        chosen = _option(value) if value is not None and value in field.choices else None
        return StaticSelectElement(action_id=VALUE_ACTION_ID, options=[_option(c) for c in field.choices],
                                   initial_option=chosen, placeholder=PlainTextObject(text="Choose"))
    if kind == "choices":
        chosen = [_option(v) for v in (value or []) if v in field.choices]
        return StaticMultiSelectElement(action_id=VALUE_ACTION_ID, options=[_option(c) for c in field.choices],
                                        initial_options=chosen or None, placeholder=PlainTextObject(text="Choose"))
    if kind == "date":
        return DatePickerElement(action_id=VALUE_ACTION_ID,
                                 initial_date=value.isoformat() if isinstance(value, date) else None)
    return DateTimePickerElement(action_id=VALUE_ACTION_ID, initial_date_time=_epoch(value))


def _text_element(field: _Field, value: Any) -> PlainTextInputElement:
    shown = None if value is None else str(value)
    max_length = field.bound("max_length")
    extra = field.info.json_schema_extra if isinstance(field.info.json_schema_extra, dict) else {}
    long = (bool(extra.get("multiline")) or (max_length or 0) > LONG_TEXT
            or (shown is not None and (len(shown) > LONG_TEXT or "\n" in shown)))
    return PlainTextInputElement(
        action_id=VALUE_ACTION_ID,
        initial_value=shown[:PLAIN_TEXT_INPUT] if shown else None,
        multiline=long or None,
        min_length=field.bound("min_length"),
        max_length=min(max_length, PLAIN_TEXT_INPUT) if max_length else None,
    )


def _number_element(field: _Field, value: Any) -> NumberInputElement:
    low = field.bound("ge") if field.bound("ge") is not None else field.bound("gt")
    high = field.bound("le") if field.bound("le") is not None else field.bound("lt")
    return NumberInputElement(
        action_id=VALUE_ACTION_ID,
        is_decimal_allowed=field.base is not int,
        initial_value=_number_text(value) if value is not None else None,
        min_value=_number_text(low) if low is not None else None,
        max_value=_number_text(high) if high is not None else None,
    )


def _number_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return str(value)


def _epoch(value: Any) -> int | None:
    if not isinstance(value, datetime):
        return None
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return int(aware.timestamp())


# --- view.state.values → model -------------------------------------------------------------------


def parse_form_state(model: type[BaseModel], state_values: Mapping[str, Mapping[str, Any]], *,
                     block_prefix: str = DEFAULT_PREFIX) -> tuple[BaseModel | None, dict[str, str]]:
    """The submitted form as a validated ``model`` — or None and ``{block_id: message}`` to show inline."""
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field in _fields(model):
        block_id = f"{block_prefix}{field.name}"
        state = _entry(_entry(state_values, block_id), VALUE_ACTION_ID)
        try:
            value = _read(field, state)
        except ValueError as exc:
            errors[block_id] = truncate(str(exc), ERROR_TEXT)
            continue
        if value is not None or field.kind == "bool":
            data[field.name] = value
        elif not field.optional:
            errors[block_id] = "Fill this in."
        elif field.info.is_required():  # `X | None` without a default: an empty input means None
            data[field.name] = None
    if errors:
        return None, errors
    try:
        return model.model_validate(data), {}
    except ValidationError as exc:
        return None, _errors_by_block(exc, block_prefix)


def _entry(mapping: Any, key: str) -> Mapping[str, Any]:
    """``mapping[key]`` when both are what Slack sends (objects); {} for anything else a client made up."""
    value = mapping.get(key) if isinstance(mapping, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _read(field: _Field, state: Mapping[str, Any]) -> Any:
    kind = field.kind
    if kind == "text":
        text = state.get("value")
        return text if isinstance(text, str) and text != "" else None
    if kind == "number":
        return _parse_number(field, state.get("value"))
    if kind == "bool":
        return any(isinstance(o, dict) and o.get("value") == CHECKED for o in _list(state.get("selected_options")))
    if kind == "choice":
        chosen = state.get("selected_option")
        return _choice_of(field, chosen.get("value")) if isinstance(chosen, dict) else None
    if kind == "choices":
        picked = [_choice_of(field, o.get("value")) for o in _list(state.get("selected_options")) if isinstance(o, dict)]
        return picked or None
    if kind == "date":
        raw = state.get("selected_date")
        if not isinstance(raw, str) or not raw:
            return None
        try:
            return date.fromisoformat(raw)
        except ValueError as exc:
            raise ValueError("Choose a date.") from exc
    raw = state.get("selected_date_time")
    if not isinstance(raw, int) or isinstance(raw, bool):
        return None
    try:
        return datetime.fromtimestamp(raw, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError("Choose a date and time.") from exc


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _parse_number(field: _Field, raw: Any) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if not isinstance(raw, str | int | float) or isinstance(raw, bool) or len(str(raw)) > 100:
        raise ValueError("Enter a number.")
    try:
        number = Decimal(str(raw).strip())
    except InvalidOperation as exc:
        raise ValueError("Enter a number.") from exc
    if not number.is_finite():
        raise ValueError("Enter a number.")
    if field.base is int:
        if number != number.to_integral_value():
            raise ValueError("Enter a whole number.")
        return int(number)
    return number if field.base is Decimal else float(number)


def _choice_of(field: _Field, value: Any) -> Any:
    for choice in field.choices:
        if _choice_value(choice) == value:
            return choice
    raise ValueError("Choose one of the options.")


def _errors_by_block(exc: ValidationError, block_prefix: str) -> dict[str, str]:
    errors: dict[str, str] = {}
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else ""
        message = err["msg"].removeprefix("Value error, ")
        errors.setdefault(f"{block_prefix}{name}", truncate(message[:1].upper() + message[1:], ERROR_TEXT))
    return errors
