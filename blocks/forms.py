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
:func:`check_form_model` when a tool is registered). Prefill values may be Python objects
(:func:`form_values`) or their JSON form (a tool call's arguments): each is read with the field's type.
Validation is pydantic's; its errors come back keyed by block id, the shape of Slack's
``response_action: errors``.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel, TypeAdapter, ValidationError
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

from blocks.limits import (
    DATE_TIME_MAX,
    INPUT_HINT,
    INPUT_LABEL,
    OPTION_TEXT,
    OPTION_VALUE,
    PLAIN_TEXT_INPUT,
    SELECT_OPTIONS,
    VIEW_BLOCKS,
    truncate,
)

VALUE_ACTION_ID = "value"
DEFAULT_PREFIX = "form:"
LONG_TEXT = 150  # a string field allowed (or holding) more than this gets a multiline input
NUMBER_DIGITS = 40  # longer plain digits are written with an exponent (and read back the same)
ERROR_TEXT = 150  # our cap, not Slack's (it documents none): an inline error sits under one field
CHECKED = "true"  # the value of a bool field's one checkbox

Kind = Literal["text", "number", "bool", "choice", "choices", "date", "datetime"]


class FormUnsupported(TypeError):
    """A field no Slack input can show; the message names the field and its type."""


class _Field:
    """How one model field is shown and read back."""

    def __init__(self, name: str, info: FieldInfo):
        self.name = name
        self.info = info
        self.key = _input_key(name, info)  # what model_validate expects: the alias when there is one
        annotation, self.optional = _unwrap_optional(info.annotation)
        self.annotation, inner = _strip_annotated(annotation)
        self.metadata = [*info.metadata, *inner]  # `Annotated[int, Field(ge=1)] | None` keeps its bounds inside
        self.kind, self.choices = _classify(name, self.annotation)
        if self.kind == "bool" and self.optional:  # a checkbox has no "not set": Yes / No / nothing chosen
            self.kind, self.choices = "choice", [True, False]
        self.optional = self.optional or not info.is_required() or self.kind == "bool"
        if self.kind == "text":
            _check_lengths(self)
        if self.kind == "number":
            self.low, self.high = _number_bounds(self)

    @property
    def block_label(self) -> str:
        return field_label(self.name, self.info.title)

    def bound(self, kind: str) -> Any:
        for meta in self.metadata:
            value = getattr(meta, kind, None)
            if value is not None:
                return value
        return None


# words people write in capitals when a field name spells them in lower case ("charge_id" -> "Charge ID")
_CAPITALS = {w: w.upper() for w in ("id", "url", "uri", "api", "ip", "sla", "uuid", "sku", "vat", "sso", "dns",
                                     "http", "https", "json", "csv", "pdf", "ui", "eu", "us", "uk", "utc")}
_CAPITALS |= {"ids": "IDs", "urls": "URLs", "apis": "APIs", "ips": "IPs", "skus": "SKUs"}
_OPTIONAL_NOTE = re.compile(r"\s*[(\[]\s*optional\s*[)\]]\s*$", re.I)
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]*)+|(?:[A-Z][a-z0-9]+){2,}")


def humanised(name: str) -> str:
    """A field name as words: ``charge_id`` -> "Charge ID", ``customerEmail`` -> "Customer email"."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    words = [w for w in re.split(r"[\s_\-]+", spaced) if w]
    if not words:
        return name
    shown = [_CAPITALS.get(w.lower(), w.lower() if w[1:].islower() or w.islower() else w) for w in words]
    return shown[0][:1].upper() + shown[0][1:] + "".join(" " + w for w in shown[1:])


def field_label(name: str, title: str | None) -> str:
    """What a form labels a field: its title, else its name as words. No backticks (a label is plain
    text: they would show literally), no "(optional)" (Slack says that of an optional input itself), and
    a title that is only the field's name again is read as words too."""
    text = _OPTIONAL_NOTE.sub("", (title or "").replace("`", "")).strip()
    if not text or text == name or _IDENTIFIER.fullmatch(text):
        return humanised(text or name)
    return text


def check_form_model(model: type[BaseModel]) -> None:
    """Raise :class:`FormUnsupported` unless every field of ``model`` has a Slack input."""
    fields = _fields(model)
    if not fields:
        raise FormUnsupported(f"{model.__name__} has no fields to show as a form")
    if len(fields) > VIEW_BLOCKS:
        raise FormUnsupported(f"{model.__name__} has {len(fields)} fields; a Slack modal holds {VIEW_BLOCKS} inputs")


def _fields(model: type[BaseModel]) -> list[_Field]:
    return [_Field(name, info) for name, info in model.model_fields.items()]


def _input_key(name: str, info: FieldInfo) -> str:
    alias = info.validation_alias if info.validation_alias is not None else info.alias
    if isinstance(alias, AliasChoices):
        alias = next((choice for choice in alias.choices if isinstance(choice, str)), None)
    return alias if isinstance(alias, str) else name


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _strip_annotated(annotation: Any) -> tuple[Any, list[Any]]:
    """The type inside ``Annotated[type, …]`` and the constraints that came with it (pydantic's own
    ``Field(...)`` inside Annotated carries its constraints in ``.metadata``)."""
    if get_origin(annotation) is not typing.Annotated:
        return annotation, []
    base, *extras = get_args(annotation)
    found: list[Any] = []
    for extra in extras:
        found.extend(extra.metadata if isinstance(extra, FieldInfo) else [extra])
    return base, found


def _literal_values(annotation: Any) -> list[Any] | None:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return [member for member in annotation]
    return None


_SIMPLE_KINDS: list[tuple[type, Kind]] = [
    (bool, "bool"), (int, "number"), (float, "number"), (Decimal, "number"), (str, "text"),
    (datetime, "datetime"), (date, "date"),
]


def _classify(name: str, annotation: Any) -> tuple[Kind, list[Any]]:
    choices = _literal_values(annotation)
    if choices is not None:
        return "choice", _checked_choices(name, choices)
    if get_origin(annotation) in (list, typing.List):  # noqa: UP006 - typing.List still appears in user code
        [item] = get_args(annotation) or [Any]
        item_choices = _literal_values(_strip_annotated(item)[0])
        if item_choices is not None:
            return "choices", _checked_choices(name, item_choices)
    for simple, kind in _SIMPLE_KINDS:
        if annotation is simple:  # exact types: a str or int subclass may not take what the input sends
            return kind, []
    raise FormUnsupported(f"field {name!r} ({_type_name(annotation)}) cannot be shown as a Slack form input")


def _checked_choices(name: str, choices: list[Any]) -> list[Any]:
    values = [_choice_value(c) for c in choices]
    if not choices or len(choices) > SELECT_OPTIONS:
        raise FormUnsupported(f"field {name!r} has {len(choices)} choices; a Slack menu holds 1 to {SELECT_OPTIONS}")
    if any(not v or len(v) > OPTION_VALUE for v in values):
        raise FormUnsupported(f"field {name!r} has an empty choice or one longer than Slack's {OPTION_VALUE} characters")
    if len(set(values)) < len(values):
        raise FormUnsupported(f"field {name!r} has two choices that read the same ({values})")
    return choices


def _check_lengths(field: _Field) -> None:
    low, high = field.bound("min_length"), field.bound("max_length")
    if (low is not None and low > PLAIN_TEXT_INPUT) or (high is not None and high < 1):
        raise FormUnsupported(f"field {field.name!r} wants {low}..{high} characters; "
                              f"a Slack text input takes 0..{PLAIN_TEXT_INPUT}")


def _number_bounds(field: _Field) -> tuple[Decimal | None, Decimal | None]:
    whole = field.annotation is int
    low = _stated_bound(field.bound("ge"), field.bound("gt"), whole=whole, up=True)
    high = _stated_bound(field.bound("le"), field.bound("lt"), whole=whole, up=False)
    if low is not None and high is not None and low > high:
        raise FormUnsupported(f"field {field.name!r} allows no number ({low} > {high})")
    return low, high


def _stated_bound(inclusive: Any, exclusive: Any, *, whole: bool, up: bool) -> Decimal | None:
    """The min/max a number input can state. An int field's is the nearest whole number inside the bound;
    another field's exclusive bound is stated as is (pydantic refuses the bound itself after submission)."""
    bound = _decimal(inclusive if inclusive is not None else exclusive)
    if bound is None or not whole:
        return bound
    rounded = bound.to_integral_value(ROUND_CEILING if up else ROUND_FLOOR)
    if inclusive is None and rounded == bound:  # an exclusive bound on a whole number: one step inside
        rounded += 1 if up else -1
    return rounded


def _decimal(value: Any) -> Decimal | None:
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


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
    """One ``input`` block per field, in field order, prefilled from ``values`` (else the field's default).

    A value the field's type cannot read, or that no input can hold (see :func:`unshowable_fields`), is
    left out or, for text over Slack's 3000 characters, cut."""
    blocks = []
    for field in _fields(model):
        hint = (field.info.description or "").strip()
        block = InputBlock(
            block_id=f"{block_prefix}{field.name}",
            label=PlainTextObject(text=truncate(field.block_label, INPUT_LABEL)),
            element=_element(field, _prefill(field, values)),
            optional=field.optional,
            hint=PlainTextObject(text=truncate(hint, INPUT_HINT)) if hint else None,
        )
        blocks.append(block.to_dict())
    return blocks


def unshowable_fields(model: type[BaseModel], values: Mapping[str, Any]) -> list[str]:
    """The fields whose value in ``values`` the form cannot show as it is (text over 3000 characters, a
    date and time outside Slack's epoch range, a value its type cannot read…): an untouched form would
    submit something else for them. Callers offering "edit" should refuse it when this is not empty."""
    misfits = []
    for field in _fields(model):
        given = _given(field, values)
        if given is None:
            continue
        value = _typed(field, given)
        if value is None or not _fits(field, value):
            misfits.append(field.name)
    return misfits


def _given(field: _Field, values: Mapping[str, Any] | None) -> Any:
    if not values:
        return None
    return values[field.name] if field.name in values else values.get(field.key)


def _prefill(field: _Field, values: Mapping[str, Any] | None) -> Any:
    given = _given(field, values)
    if given is None and (not values or (field.name not in values and field.key not in values)):
        given = _default(field)
    return None if given is None else _typed(field, given)


def _default(field: _Field) -> Any:
    if field.info.is_required():
        return None
    try:
        return field.info.get_default(call_default_factory=True)
    except (TypeError, ValueError):  # a default factory that wants the other fields: nothing to prefill
        return None


def _typed(field: _Field, value: Any) -> Any:
    """``value`` read with the field's type (a tool call's JSON arguments carry "2026-12-04" for a date,
    "low" for an Enum member, "12.50" for a Decimal); None when the type cannot read it."""
    try:
        return _adapter(field.annotation).validate_python(value)
    except (ValidationError, TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=256)
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def _fits(field: _Field, value: Any) -> bool:
    if field.kind == "text":
        return len(value) <= PLAIN_TEXT_INPUT
    if field.kind == "number":
        return _number_text(value) is not None
    if field.kind == "datetime":
        return _epoch(value) is not None
    if field.kind == "choices":
        return len(set(value)) == len(value)  # a multi-select cannot pick one option twice
    return True


def _element(field: _Field, value: Any) -> Any:
    kind = field.kind
    if kind == "text":
        return _text_element(field, value)
    if kind == "number":
        return _number_element(field, value)
    if kind == "bool":  # "Yes" beside the box: the block's label already says what it is
        option = Option(value=CHECKED, text=PlainTextObject(text="Yes"))
        return CheckboxesElement(action_id=VALUE_ACTION_ID, options=[option],
                                 initial_options=[option] if value is True else None)
    if kind == "choice":
        return StaticSelectElement(action_id=VALUE_ACTION_ID, options=[_option(c) for c in field.choices],
                                   initial_option=_option(value) if value is not None else None,
                                   placeholder=PlainTextObject(text="Choose"))
    if kind == "choices":
        return _multi_select_element(field, value)
    if kind == "date":
        return DatePickerElement(action_id=VALUE_ACTION_ID, initial_date=value.isoformat() if value else None)
    return DateTimePickerElement(action_id=VALUE_ACTION_ID, initial_date_time=_epoch(value))


def _text_element(field: _Field, value: str | None) -> PlainTextInputElement:
    max_length = field.bound("max_length")
    extra = field.info.json_schema_extra if isinstance(field.info.json_schema_extra, dict) else {}
    long = (bool(extra.get("multiline")) or (max_length or 0) > LONG_TEXT
            or (value is not None and (len(value) > LONG_TEXT or "\n" in value)))
    return PlainTextInputElement(
        action_id=VALUE_ACTION_ID,
        initial_value=value[:PLAIN_TEXT_INPUT] if value else None,
        multiline=long or None,
        min_length=field.bound("min_length"),
        max_length=min(max_length, PLAIN_TEXT_INPUT) if max_length else None,
    )


def _number_element(field: _Field, value: Any) -> NumberInputElement:
    return NumberInputElement(
        action_id=VALUE_ACTION_ID,
        is_decimal_allowed=field.annotation is not int,
        initial_value=_number_text(value),
        min_value=_number_text(field.low),
        max_value=_number_text(field.high),
    )


def _multi_select_element(field: _Field, value: list[Any] | None) -> StaticMultiSelectElement:
    chosen = list(dict.fromkeys(value or []))  # each option once, in the order given
    most = field.bound("max_length")
    return StaticMultiSelectElement(
        action_id=VALUE_ACTION_ID, options=[_option(c) for c in field.choices],
        initial_options=[_option(c) for c in chosen] or None, placeholder=PlainTextObject(text="Choose"),
        max_selected_items=most if most and 1 <= most < len(field.choices) else None,
    )


def _number_text(value: Any) -> str | None:
    """A number as the string Slack's number_input takes: plain digits, no exponent unless it would be
    long (None for nothing, NaN or infinity)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    number = _decimal(repr(value) if isinstance(value, float) else value)  # repr: the float's shortest digits
    if number is None:
        return None
    if isinstance(value, float) and value.is_integer():
        number = number.to_integral_value()  # 40.0 reads "40", as a person would type it
    plain = format(number, "f")
    return plain if len(plain) <= NUMBER_DIGITS else str(number)


def _epoch(value: datetime | None) -> int | None:
    """Epoch seconds for a datetimepicker (naive means UTC); None outside what Slack takes (0 to 10 digits)."""
    if value is None:
        return None
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    seconds = int(aware.timestamp())
    return seconds if 0 <= seconds <= DATE_TIME_MAX else None


# --- view.state.values → model -------------------------------------------------------------------


def parse_form_state(model: type[BaseModel], state_values: Mapping[str, Mapping[str, Any]], *,
                     block_prefix: str = DEFAULT_PREFIX) -> tuple[BaseModel | None, dict[str, str]]:
    """The submitted form as a validated ``model`` — or None and ``{block_id: message}`` to show inline.

    Never raises on what a client sends: wrong shapes and junk read as empty inputs or inline errors."""
    fields = _fields(model)
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field in fields:
        block_id = f"{block_prefix}{field.name}"
        state = _entry(_entry(state_values, block_id), VALUE_ACTION_ID)
        try:
            value = _read(field, state)
        except ValueError as exc:
            errors[block_id] = truncate(str(exc), ERROR_TEXT)
            continue
        if value is not None or field.kind == "bool":
            data[field.key] = value
        elif not field.optional:
            errors[block_id] = "Fill this in."
        elif field.info.is_required():  # `X | None` without a default: an empty input means None
            data[field.key] = None
    if errors:
        return None, errors
    try:
        return model.model_validate(data), {}
    except ValidationError as exc:
        return None, _errors_by_block(exc, fields, block_prefix)


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
        return _parse_date(state.get("selected_date"))
    return _parse_date_time(state.get("selected_date_time"))


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
    if field.annotation is int:
        if number != number.to_integral_value():
            raise ValueError("Enter a whole number.")
        return int(number)
    return number if field.annotation is Decimal else float(number)  # Decimal keeps the digits typed


def _parse_date(raw: Any) -> date | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError as exc:
        raise ValueError("Choose a date.") from exc


def _parse_date_time(raw: Any) -> datetime | None:
    if not isinstance(raw, int) or isinstance(raw, bool):
        return None
    try:
        return datetime.fromtimestamp(raw, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError("Choose a date and time.") from exc


def _choice_of(field: _Field, value: Any) -> Any:
    for choice in field.choices:
        if _choice_value(choice) == value:
            return choice
    raise ValueError("Choose one of the options.")


def _errors_by_block(exc: ValidationError, fields: list[_Field], block_prefix: str) -> dict[str, str]:
    """pydantic's errors under the field they are about; an error about the whole model (a model
    validator's) goes under the first field, since Slack shows errors only under an input block."""
    name_of = {field.key: field.name for field in fields} | {field.name: field.name for field in fields}
    first = fields[0].name if fields else ""
    errors: dict[str, str] = {}
    for err in exc.errors():
        where = err["loc"][0] if err["loc"] else None
        name = name_of.get(where, first) if isinstance(where, str) else first
        message = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        errors.setdefault(f"{block_prefix}{name}", truncate(message[:1].upper() + message[1:], ERROR_TEXT))
    return errors
