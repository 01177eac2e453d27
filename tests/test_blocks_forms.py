"""The one form generator (blocks.forms): every supported field type survives the trip pydantic model →
Block Kit inputs → what Slack sends back in ``view.state.values`` → the same model, and bad input comes
back as inline errors under the right field."""

from __future__ import annotations

import enum
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, create_model

from blocks.forms import FormUnsupported, check_form_model, form_blocks, parse_form_state
from tests.blocks_validation import assert_valid_view


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


Plan = Literal["basic", "pro", "enterprise"]

# field type → a strategy for its values (what a tool's arguments model may hold)
TYPES: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "str": (str, st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\r"),
                         min_size=1, max_size=200)),
    "multiline": (str, st.text(st.characters(blacklist_categories=("Cs",), whitelist_characters="\n",
                                             blacklist_characters="\r"), min_size=1, max_size=400)
                  .filter(lambda s: s.strip("\n") != "" and "\x00" not in s)),
    "int": (int, st.integers(min_value=-10**12, max_value=10**12)),
    "float": (float, st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)),
    "decimal": (Decimal, st.decimals(allow_nan=False, allow_infinity=False, places=4,
                                     min_value=Decimal("-1e9"), max_value=Decimal("1e9"))),
    "bool": (bool, st.booleans()),
    "literal": (Plan, st.sampled_from(["basic", "pro", "enterprise"])),
    "enum": (Priority, st.sampled_from(list(Priority))),
    "date": (date, st.dates()),
    "datetime": (datetime, st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1))
                 .map(lambda d: d.replace(microsecond=0, tzinfo=UTC))),
    "literals": (list[Plan], st.lists(st.sampled_from(["basic", "pro", "enterprise"]), unique=True, min_size=1)),
}


def slack_state(blocks: list[dict]) -> dict[str, dict[str, Any]]:
    """What Slack sends back for a form submitted untouched: each element's initial value, in Slack's shapes."""
    state: dict[str, dict[str, Any]] = {}
    for block in blocks:
        element = block["element"]
        kind = element["type"]
        if kind in ("plain_text_input", "number_input"):
            value = {"value": element.get("initial_value")}
        elif kind in ("checkboxes", "multi_static_select"):
            value = {"selected_options": element.get("initial_options", [])}
        elif kind == "static_select":
            value = {"selected_option": element.get("initial_option")}
        elif kind == "datepicker":
            value = {"selected_date": element.get("initial_date")}
        elif kind == "datetimepicker":
            value = {"selected_date_time": element.get("initial_date_time")}
        else:
            raise AssertionError(f"the generator made an element Slack's state has no shape for: {kind}")
        state[block["block_id"]] = {element["action_id"]: {"type": kind, **value}}
    return state


def modal(blocks: list[dict]) -> dict:
    return {"type": "modal", "title": {"type": "plain_text", "text": "Edit & approve"},
            "submit": {"type": "plain_text", "text": "Approve"}, "blocks": blocks}


@st.composite
def models_and_values(draw) -> tuple[type[BaseModel], dict[str, Any]]:
    names = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=6))
    fields: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for i, name in enumerate(names):
        annotation, strategy = TYPES[name]
        optional = draw(st.booleans())
        value = draw(st.none() if optional and draw(st.booleans()) else strategy)
        field_name = f"{name}_{i}"
        fields[field_name] = (annotation | None, None) if optional else (annotation, ...)
        values[field_name] = value
    return create_model("Args", **fields), values


@settings(max_examples=100, deadline=None)
@given(models_and_values())
def test_every_supported_field_type_round_trips_through_slacks_view_state(case) -> None:
    model, values = case
    proposed = model.model_validate(values)
    blocks = form_blocks(model, proposed.model_dump())
    assert_valid_view(modal(blocks))
    parsed, errors = parse_form_state(model, slack_state(blocks))
    assert errors == {}
    assert parsed == proposed


class Refund(BaseModel):
    charge_id: str = Field(min_length=3, description="The Stripe charge, e.g. ch_1001")
    amount: float = Field(gt=0, le=100)
    plan: Plan = "basic"
    notify: bool = True


def test_inputs_carry_labels_hints_bounds_and_what_is_optional() -> None:
    blocks = {b["block_id"]: b for b in form_blocks(Refund, {"charge_id": "ch_1", "amount": 40.0})}
    assert list(blocks) == ["form:charge_id", "form:amount", "form:plan", "form:notify"]
    charge = blocks["form:charge_id"]
    assert charge["label"]["text"] == "Charge id" and charge["hint"]["text"] == "The Stripe charge, e.g. ch_1001"
    assert charge["optional"] is False and charge["element"]["min_length"] == 3
    amount = blocks["form:amount"]["element"]
    assert (amount["type"], amount["is_decimal_allowed"], amount["initial_value"]) == ("number_input", True, "40")
    assert (amount["min_value"], amount["max_value"]) == ("0", "100")
    assert blocks["form:plan"]["element"]["initial_option"]["value"] == "basic"  # the default, prefilled
    assert blocks["form:notify"]["element"]["initial_options"][0]["value"] == "true"


def test_bad_input_comes_back_as_short_errors_under_each_field_and_never_raises() -> None:
    blocks = form_blocks(Refund, {"charge_id": "ch_1", "amount": 40.0})
    state = slack_state(blocks)
    state["form:charge_id"]["value"]["value"] = "c"  # too short
    state["form:amount"]["value"]["value"] = "250"  # over le=100
    state["form:plan"]["value"]["selected_option"] = {"value": "platinum"}  # not offered
    parsed, errors = parse_form_state(Refund, state)
    assert parsed is None
    assert set(errors) == {"form:plan"}  # choices are checked first, before pydantic runs
    state["form:plan"]["value"]["selected_option"] = {"value": "pro"}
    parsed, errors = parse_form_state(Refund, state)
    assert parsed is None and set(errors) == {"form:charge_id", "form:amount"}
    assert "at least 3 characters" in errors["form:charge_id"] and "less than or equal to 100" in errors["form:amount"]
    assert all(len(message) <= 150 for message in errors.values())
    state["form:amount"]["value"]["value"] = "forty"
    _, errors = parse_form_state(Refund, state)
    assert errors["form:amount"] == "Enter a number."


def test_a_required_field_left_empty_says_so_and_an_optional_one_keeps_its_default() -> None:
    state = slack_state(form_blocks(Refund, {"charge_id": "ch_1", "amount": 40.0}))
    state["form:amount"]["value"]["value"] = None
    state["form:plan"]["value"]["selected_option"] = None
    state["form:notify"]["value"]["selected_options"] = []
    parsed, errors = parse_form_state(Refund, state)
    assert errors == {"form:amount": "Fill this in."}
    state["form:amount"]["value"]["value"] = "12.5"
    parsed, errors = parse_form_state(Refund, state)
    assert errors == {} and parsed == Refund(charge_id="ch_1", amount=12.5, plan="basic", notify=False)


def test_whole_numbers_only_for_int_fields() -> None:
    model = create_model("Count", n=(int, ...))
    state = slack_state(form_blocks(model, {"n": 3}))
    assert form_blocks(model, {"n": 3})[0]["element"]["is_decimal_allowed"] is False
    state["form:n"]["value"]["value"] = "2.5"
    assert parse_form_state(model, state) == (None, {"form:n": "Enter a whole number."})


class Item(BaseModel):
    sku: str


@pytest.mark.parametrize(("annotation", "named"), [
    (Item, "'item' (Item)"),
    (dict[str, int], "'item'"),
    (list[str], "'item'"),
    (int | str, "'item'"),
])
def test_fields_no_slack_input_can_show_are_refused_by_name(annotation, named) -> None:
    model = create_model("Odd", item=(annotation, ...))
    with pytest.raises(FormUnsupported, match=named.replace("(", r"\(").replace(")", r"\)")):
        check_form_model(model)


def test_long_text_gets_a_multiline_input() -> None:
    model = create_model("Note", body=(str, Field(max_length=2000)), title=(str, ...))
    body, title = form_blocks(model, {"body": "x", "title": "short"})
    assert body["element"]["multiline"] is True and body["element"]["max_length"] == 2000
    assert "multiline" not in title["element"]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
                    max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["form:charge_id", "form:amount", "form:plan", "form:notify", "x"]),
                       JSON | st.dictionaries(st.just("value"), JSON | st.dictionaries(
                           st.sampled_from(["type", "value", "selected_option", "selected_options"]), JSON))))
def test_whatever_a_client_submits_the_parser_answers_with_a_model_or_errors_and_never_raises(state) -> None:
    parsed, errors = parse_form_state(Refund, state)
    assert (parsed is None) == bool(errors)
    assert all(block.startswith("form:") and message for block, message in errors.items())
