"""The one form generator (blocks.forms): every supported field type survives the trip pydantic model →
Block Kit inputs → what Slack sends back in ``view.state.values`` → the same model, and bad input comes
back as inline errors under the right field."""

from __future__ import annotations

import enum
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, create_model, model_validator

from blocks.forms import (
    FormUnsupported,
    check_form_model,
    form_blocks,
    form_values,
    parse_form_state,
    unshowable_fields,
)
from localslack.blockkit import validate_view
from tests.blocks_validation import assert_valid_view


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


Plan = Literal["basic", "pro", "enterprise"]
ONE_LINE = st.characters(blacklist_categories=("Cs", "Cc"))

# field type → a strategy for its values (what a tool's arguments model may hold)
TYPES: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "str": (str, st.text(ONE_LINE, min_size=1, max_size=200)),
    "multiline": (str, st.text(st.characters(blacklist_categories=("Cs",), whitelist_characters="\n",
                                             blacklist_characters="\r"), min_size=1, max_size=400)
                  .filter(lambda s: s.strip("\n") != "" and "\x00" not in s)),
    "bounded_str": (Annotated[str, Field(min_length=2, max_length=300)], st.text(ONE_LINE, min_size=2, max_size=300)),
    "int": (int, st.integers(min_value=-10**12, max_value=10**12)),
    "bounded_int": (Annotated[int, Field(gt=-1000, lt=1000)], st.integers(min_value=-999, max_value=999)),
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
    "enums": (list[Priority], st.lists(st.sampled_from(list(Priority)), unique=True, min_size=1)),
}


def state_from_blocks(blocks: list[dict]) -> dict[str, dict[str, Any]]:
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
@given(models_and_values(), st.sampled_from(["python", "json"]))
def test_every_supported_field_type_round_trips_through_slacks_view_state(case, dump_mode) -> None:
    """Prefilled from Python values (form_values) or from their JSON form (a tool call's arguments)."""
    model, values = case
    proposed = model.model_validate(values)
    blocks = form_blocks(model, proposed.model_dump(mode=dump_mode))
    assert_valid_view(modal(blocks))
    assert validate_view(modal(blocks)) == []  # and the local Slack, with Slack's rules, takes it too
    assert unshowable_fields(model, proposed.model_dump(mode=dump_mode)) == []
    parsed, errors = parse_form_state(model, state_from_blocks(blocks))
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
    assert charge["label"]["text"] == "Charge ID" and charge["hint"]["text"] == "The Stripe charge, e.g. ch_1001"
    assert charge["optional"] is False and charge["element"]["min_length"] == 3
    amount = blocks["form:amount"]["element"]
    assert (amount["type"], amount["is_decimal_allowed"], amount["initial_value"]) == ("number_input", True, "40")
    assert (amount["min_value"], amount["max_value"]) == ("0", "100")
    assert blocks["form:plan"]["element"]["initial_option"]["value"] == "basic"  # the default, prefilled
    assert blocks["form:notify"]["element"]["initial_options"][0]["value"] == "true"
    assert blocks["form:notify"]["optional"] is True  # so unticking it is allowed


def test_a_prefix_other_than_the_default_names_the_blocks() -> None:
    blocks = form_blocks(Refund, {"charge_id": "ch_1", "amount": 4}, block_prefix="hitl_arg:")
    assert [b["block_id"] for b in blocks][:2] == ["hitl_arg:charge_id", "hitl_arg:amount"]
    assert {b["element"]["action_id"] for b in blocks} == {"value"}
    parsed, errors = parse_form_state(Refund, state_from_blocks(blocks), block_prefix="hitl_arg:")
    assert errors == {} and parsed == Refund(charge_id="ch_1", amount=4)


def test_bad_input_comes_back_as_short_errors_under_each_field_and_never_raises() -> None:
    blocks = form_blocks(Refund, {"charge_id": "ch_1", "amount": 40.0})
    state = state_from_blocks(blocks)
    state["form:charge_id"]["value"]["value"] = "c"  # too short
    state["form:amount"]["value"]["value"] = "250"  # over le=100
    state["form:plan"]["value"]["selected_option"] = {"value": "platinum"}  # not offered
    parsed, errors = parse_form_state(Refund, state)
    assert parsed is None
    assert errors == {"form:plan": "Choose one of the options."}  # choices are checked before pydantic runs
    state["form:plan"]["value"]["selected_option"] = {"value": "pro"}
    parsed, errors = parse_form_state(Refund, state)
    assert parsed is None and set(errors) == {"form:charge_id", "form:amount"}
    assert errors["form:charge_id"] == "String should have at least 3 characters"
    assert errors["form:amount"] == "Input should be less than or equal to 100"
    state["form:amount"]["value"]["value"] = "forty"
    _, errors = parse_form_state(Refund, state)
    assert errors["form:amount"] == "Enter a number."


def test_a_required_field_left_empty_says_so_and_an_optional_one_keeps_its_default() -> None:
    state = state_from_blocks(form_blocks(Refund, {"charge_id": "ch_1", "amount": 40.0}))
    state["form:amount"]["value"]["value"] = None
    state["form:plan"]["value"]["selected_option"] = None
    state["form:notify"]["value"]["selected_options"] = []
    parsed, errors = parse_form_state(Refund, state)
    assert errors == {"form:amount": "Fill this in."}
    state["form:amount"]["value"]["value"] = "12.5"
    parsed, errors = parse_form_state(Refund, state)
    assert errors == {} and parsed == Refund(charge_id="ch_1", amount=12.5, plan="basic", notify=False)


def test_whole_numbers_only_for_int_fields_and_exclusive_bounds_step_inside() -> None:
    model = create_model("Count", n=(int, Field(gt=0, lt=10)))
    [block] = form_blocks(model, {"n": 3})
    element = block["element"]
    assert (element["is_decimal_allowed"], element["min_value"], element["max_value"]) == (False, "1", "9")
    state = state_from_blocks([block])
    state["form:n"]["value"]["value"] = "2.5"
    assert parse_form_state(model, state) == (None, {"form:n": "Enter a whole number."})
    maybe = create_model("Maybe", n=(Annotated[int, Field(ge=1, le=9)] | None, None))
    [block] = form_blocks(maybe)
    assert (block["element"]["min_value"], block["element"]["max_value"], block["optional"]) == ("1", "9", True)


def test_a_decimal_keeps_the_digits_typed() -> None:
    model = create_model("Price", price=(Decimal, ...))
    [block] = form_blocks(model, {"price": "12.50"})  # a tool call's JSON form of Decimal("12.50")
    assert block["element"]["initial_value"] == "12.50"
    parsed, _ = parse_form_state(model, {"form:price": {"value": {"type": "number_input", "value": "0.10"}}})
    assert str(parsed.price) == "0.10"


def test_json_arguments_prefill_enums_dates_and_times() -> None:
    class Task(BaseModel):
        priority: Priority
        due: date
        at: datetime
        tags: list[Priority]

    blocks = {b["block_id"]: b["element"] for b in form_blocks(Task, {
        "priority": "high", "due": "2026-12-04", "at": "2025-12-04T00:00:00Z", "tags": ["low"]})}
    assert blocks["form:priority"]["initial_option"]["value"] == "high"
    assert blocks["form:due"]["initial_date"] == "2026-12-04"
    assert blocks["form:at"]["initial_date_time"] == 1764806400
    assert [o["value"] for o in blocks["form:tags"]["initial_options"]] == ["low"]


def test_a_naive_datetime_is_utc_and_comes_back_aware() -> None:
    model = create_model("When", at=(datetime, ...))
    [block] = form_blocks(model, form_values(model(at=datetime(2025, 12, 4))))
    assert block["element"]["initial_date_time"] == 1764806400
    parsed, _ = parse_form_state(model, state_from_blocks([block]))
    assert parsed.at == datetime(2025, 12, 4, tzinfo=UTC) and parsed.at.tzinfo is not None


def test_values_no_input_can_hold_are_named_and_left_out_instead_of_breaking_the_modal() -> None:
    model = create_model("Odd", at=(datetime, ...), body=(str, ...), n=(float, ...))
    values = {"at": datetime(1960, 1, 1, tzinfo=UTC), "body": "x" * 3001, "n": "not a number"}
    blocks = form_blocks(model, values)
    assert_valid_view(modal(blocks))
    assert validate_view(modal(blocks)) == []
    elements = {b["block_id"]: b["element"] for b in blocks}
    assert "initial_date_time" not in elements["form:at"] and "initial_value" not in elements["form:n"]
    assert len(elements["form:body"]["initial_value"]) == 3000
    assert unshowable_fields(model, values) == ["at", "body", "n"]


def test_a_field_with_an_alias_is_read_back_under_its_name() -> None:
    class Charge(BaseModel):
        charge_id: str = Field(alias="chargeId", min_length=3)

    [block] = form_blocks(Charge, {"chargeId": "ch_1"})
    assert block["block_id"] == "form:charge_id" and block["element"]["initial_value"] == "ch_1"
    parsed, errors = parse_form_state(Charge, state_from_blocks([block]))
    assert errors == {} and parsed.charge_id == "ch_1"
    short = {"form:charge_id": {"value": {"type": "plain_text_input", "value": "c"}}}
    assert parse_form_state(Charge, short) == (None, {"form:charge_id": "String should have at least 3 characters"})


def test_an_error_about_the_whole_model_shows_under_the_first_field() -> None:
    class Window(BaseModel):
        start: int
        end: int

        @model_validator(mode="after")
        def ordered(self) -> Window:
            if self.end < self.start:
                raise ValueError("end comes before start")
            return self

    state = state_from_blocks(form_blocks(Window, {"start": 5, "end": 1}))
    assert parse_form_state(Window, state) == (None, {"form:start": "End comes before start"})


def test_a_multi_select_stops_at_the_lists_max_length() -> None:
    model = create_model("Pick", plans=(list[Plan], Field(max_length=2)))
    [block] = form_blocks(model, {"plans": ["pro"]})
    assert block["element"]["max_selected_items"] == 2


class Item(BaseModel):
    sku: str


@pytest.mark.parametrize(("annotation", "named"), [
    (Item, "field 'item' (Item) cannot be shown as a Slack form input"),
    (dict[str, int], "field 'item'"),
    (list[str], "field 'item'"),
    (list[Item], "field 'item'"),
    (int | str, "field 'item'"),
    (Literal["", "x"], "field 'item' has an empty choice"),
    (Literal[1, "1"], "field 'item' has two choices that read the same"),
    (Literal[tuple(f"c{i}" for i in range(101))], "field 'item' has 101 choices"),
    (Annotated[str, Field(min_length=3001)], "field 'item' wants 3001..None characters"),
    (Annotated[int, Field(ge=5, le=1)], "field 'item' allows no number"),
])
def test_fields_no_slack_input_can_show_are_refused_by_name(annotation, named) -> None:
    model = create_model("Odd", item=(annotation, ...))
    with pytest.raises(FormUnsupported) as refused:
        check_form_model(model)
    assert named in str(refused.value)


def test_a_model_a_modal_cannot_hold_is_refused() -> None:
    with pytest.raises(FormUnsupported, match="has no fields"):
        check_form_model(create_model("Empty"))
    with pytest.raises(FormUnsupported, match="101 fields"):
        check_form_model(create_model("Huge", **{f"f{i}": (int, ...) for i in range(101)}))
    check_form_model(Refund)  # and one it can passes


def test_long_text_gets_a_multiline_input() -> None:
    model = create_model("Note", body=(str, Field(max_length=2000)), title=(str, ...),
                         note=(str, Field(json_schema_extra={"multiline": True})))
    body, title, note = form_blocks(model, {"body": "x", "title": "short", "note": "n"})
    assert body["element"]["multiline"] is True and body["element"]["max_length"] == 2000
    assert "multiline" not in title["element"] and note["element"]["multiline"] is True
    [prefilled] = form_blocks(create_model("Letter", text=(str, ...)), {"text": "line one\nline two"})
    assert prefilled["element"]["multiline"] is True


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
    assert set(errors) <= {"form:charge_id", "form:amount", "form:plan", "form:notify"}  # real blocks only
    assert all(0 < len(message) <= 150 for message in errors.values())


class Labelled(BaseModel):
    order_url: str = Field(title="`order_url` (optional)", default="")
    api_key_id: str
    customer_facing: bool = Field(title="Customers are affected")


def test_labels_read_as_words_without_backticks_or_a_second_optional_or_a_repeated_yes_no() -> None:
    blocks = {b["block_id"]: b for b in form_blocks(Labelled)}
    url, key, facing = blocks["form:order_url"], blocks["form:api_key_id"], blocks["form:customer_facing"]
    assert url["label"]["text"] == "Order URL" and url["optional"] is True  # Slack adds "(optional)" itself
    assert key["label"]["text"] == "API key ID"
    assert facing["label"]["text"] == "Customers are affected"
    assert [o["text"]["text"] for o in facing["element"]["options"]] == ["Yes"]  # not the label again
    assert_valid_view({"type": "modal", "title": {"type": "plain_text", "text": "x"},
                       "submit": {"type": "plain_text", "text": "Send"}, "blocks": list(blocks.values())})
