"""``request_info``: the agent asks the person to fill in a small form (DESIGN §12).

The model describes the fields; they become a flat JSON schema (``bot.forms``) and ``ctx.form()`` asks
for it, so the form is durable like any question and shown by the one form generator.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from bot.builtin.ask_question import MAX_TIMEOUT_MINUTES
from bot.deferred import DeferredModel
from bot.forms import model_from_schema
from bot.tools import ToolContext, tool

FieldType = Literal["text", "long_text", "integer", "number", "yes_no", "choice", "choices", "date", "datetime"]
MAX_INFO_FIELDS = 10
Choice = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=75)]

_SCHEMAS: dict[str, dict[str, Any]] = {
    "text": {"type": "string", "maxLength": 150},
    "long_text": {"type": "string", "maxLength": 3000, "multiline": True},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "yes_no": {"type": "boolean", "default": False},  # a checkbox: unticked is "no"
    "date": {"type": "string", "format": "date"},
    "datetime": {"type": "string", "format": "date-time"},
}


class InfoField(DeferredModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", description="snake_case key for the value, e.g. order_id")
    label: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)] = Field(
        description="What the person sees, e.g. 'Order number'")
    type: FieldType = "text"
    options: list[Choice] | None = Field(default=None, description="The choices, for 'choice' and 'choices' only")
    required: bool = True
    hint: Annotated[str, StringConstraints(max_length=150)] | None = None

    @model_validator(mode="after")
    def options_fit_the_type(self) -> InfoField:
        wants_options = self.type in ("choice", "choices")
        if wants_options and not (self.options and 2 <= len(self.options) <= 25):
            raise ValueError(f"field {self.name!r}: a {self.type} field needs 2 to 25 options")
        if not wants_options and self.options:
            raise ValueError(f"field {self.name!r}: options are only for 'choice' and 'choices' fields")
        if self.options and len({o.lower() for o in self.options}) != len(self.options):
            raise ValueError(f"field {self.name!r}: its options repeat")
        return self

    def schema_of(self) -> dict[str, Any]:
        if self.type == "choice":
            schema: dict[str, Any] = {"type": "string", "enum": list(self.options or [])}
        elif self.type == "choices":
            schema = {"type": "array", "items": {"type": "string", "enum": list(self.options or [])}}
        else:
            schema = dict(_SCHEMAS[self.type])
        return {**schema, "title": self.label, **({"description": self.hint} if self.hint else {})}


class InfoRequest(DeferredModel):
    model_config = ConfigDict(extra="forbid")

    prompt: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)] = Field(
        description="Why you need this, in a sentence; shown above the form")
    fields: list[InfoField] = Field(min_length=1, max_length=MAX_INFO_FIELDS)
    title: Annotated[str, StringConstraints(strip_whitespace=True, max_length=24)] | None = Field(
        default=None, description="A short name for the form, shown as its title, e.g. 'Incident report'")
    timeout_minutes: int | None = Field(
        default=None, ge=1, le=MAX_TIMEOUT_MINUTES,
        description="Only if the information is useless after a while: stop waiting after this many minutes.",
    )

    @model_validator(mode="after")
    def unique_names(self) -> InfoRequest:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError("field names must be unique")
        return self

    def form(self) -> dict[str, Any]:
        """The form as a flat JSON schema."""
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {f.name: f.schema_of() for f in self.fields},
            "required": [f.name for f in self.fields if f.required and f.type != "yes_no"],
        }
        if self.title:  # what the form is for: the modal's title
            schema["title"] = self.title
        return schema


@tool
async def request_info(args: InfoRequest, ctx: ToolContext) -> dict[str, Any]:
    """Ask the person for several pieces of information at once, as a form they fill in (in Slack: a
    card with an "Open form" button). Use it when you need structured details (numbers, dates, choices)
    the person has and you do not; for a single question use ask_question."""
    model = model_from_schema(args.form(), name="RequestedInfo")
    timeout = timedelta(minutes=args.timeout_minutes) if args.timeout_minutes else None
    answer = await ctx.form(model, args.prompt, timeout=timeout)
    if answer.status == "answered" and answer.values is not None:
        return {"status": "answered", "values": answer.values.model_dump(mode="json", by_alias=True),
                "by": answer.responder.principal_id if answer.responder else None}
    if answer.status == "expired":
        return {"status": "expired", "message": f"Nobody filled in the form within {args.timeout_minutes} minutes."}
    return {"status": answer.status}  # interrupted (they wrote something else instead) or unavailable
