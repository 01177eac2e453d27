"""``ask_question``: the agent asks the person a question, optionally with 2–3 choices."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from bot.protocol import InputOption
from bot.tools import ToolContext, tool

Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]


class QuestionOption(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: Label = Field(description="The choice as the person sees it: 1 to 5 words.")
    description: Annotated[str, StringConstraints(max_length=200)] | None = None

    @field_validator("label")
    @classmethod
    def short_label(cls, value: str) -> str:
        if not 1 <= len(value.split()) <= 5:
            raise ValueError("an option label must be 1 to 5 words")
        return value


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
    options: list[QuestionOption] | None = Field(
        default=None, description="2 or 3 choices; omit for an open question. People may always type their own."
    )

    @field_validator("options")
    @classmethod
    def two_or_three_unique(cls, value: list[QuestionOption] | None) -> list[QuestionOption] | None:
        if value is None:
            return None
        if not 2 <= len(value) <= 3:
            raise ValueError("give 2 or 3 options, or none")
        labels = [o.label.lower() for o in value]
        if len(set(labels)) != len(labels):
            raise ValueError("option labels must be unique")
        return value


@tool
async def ask_question(args: Question, ctx: ToolContext) -> dict[str, Any]:
    """Ask the person a question and wait for the answer. Use it when you need a decision or a
    fact only they have. Offer 2-3 short options when the answer is a choice; they can always
    type their own answer instead."""
    options = [InputOption(id=o.label, label=o.label, description=o.description) for o in args.options or []]
    answer = await ctx.ask(args.question, options=options, allow_free_text=True)
    if answer.status == "interrupted":
        return {"interrupted": True}
    if answer.status == "unavailable":
        return {"status": "unavailable"}
    return {"status": "answered", "answer": answer.value}
