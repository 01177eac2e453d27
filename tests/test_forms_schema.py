"""Forms as data (bot.forms): a model's form survives as a JSON schema — what a parked request keeps —
and is rebuilt in any replica into a model that shows, reads and validates the same; junk schemas
(from a model's request_info call or an MCP server) are refused by name, never crash."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from blocks.forms import form_blocks, parse_form_state
from bot.forms import FormSchemaError, checked_values, form_schema, model_from_schema
from tests.blocks_validation import assert_valid_view
from tests.test_blocks_forms import modal, models_and_values, state_from_blocks


@settings(max_examples=100, deadline=None)
@given(models_and_values())
def test_a_form_rebuilt_from_its_schema_shows_and_reads_back_what_the_model_does(case) -> None:
    model, values = case
    original = model.model_validate(values).model_dump(mode="json", by_alias=True)
    rebuilt = model_from_schema(form_schema(model))
    blocks = form_blocks(rebuilt, original)
    assert blocks == form_blocks(model, original)  # the same inputs, labels, bounds and prefill
    assert_valid_view(modal(blocks))
    parsed, errors = parse_form_state(rebuilt, state_from_blocks(blocks))
    assert errors == {}
    assert model.model_validate(parsed.model_dump(mode="json", by_alias=True)).model_dump(
        mode="json", by_alias=True) == original
    assert checked_values(form_schema(model), original) == original


def test_names_python_cannot_use_keep_their_own_name_in_the_values() -> None:
    schema = {"type": "object", "required": ["first-name", "json"],
              "properties": {"first-name": {"type": "string"}, "json": {"type": "integer"}, "_x": {"type": "boolean"}}}
    assert checked_values(schema, {"first-name": "Ada", "json": 3}) == {"first-name": "Ada", "json": 3, "_x": None}


@pytest.mark.parametrize(("schema", "named"), [
    ({"type": "object", "properties": {"where": {"type": "object"}}}, "'where'"),
    ({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}, "'tags'"),
    ({"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}, "'x'"),
    ({"type": "object", "properties": {"x": {"enum": [1.5, "a"]}}}, "'x'"),
    ({"type": "object", "properties": {}}, "at least one field"),
    ({"type": "array"}, "object schema"),
    ({"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(21)}}, "at most 20"),
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}, "minimum must be a number"),
])
def test_schemas_no_form_can_show_are_refused_saying_what(schema: dict, named: str) -> None:
    with pytest.raises(FormSchemaError, match=named):
        model_from_schema(schema)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda children: st.lists(children, max_size=4)
                    | st.dictionaries(st.sampled_from(["type", "properties", "enum", "anyOf", "items", "format",
                                                       "minimum", "maxLength", "default", "required", "title",
                                                       "$ref", "const", "a", "b"]), children, max_size=5),
                    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(JSON, JSON)
@example(schema={"required": 1, "properties": {"type": None}}, values=None)  # found by this test: a TypeError
def test_any_json_as_a_form_and_any_json_as_its_values_is_a_model_an_error_or_a_refusal(schema: Any, values: Any) -> None:
    try:
        model = model_from_schema(schema)
    except FormSchemaError:
        return
    assert issubclass(model, BaseModel)
    try:
        checked_values(schema, values)
    except ValueError:
        pass
