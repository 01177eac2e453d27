"""``ask_question``: the agent asks the person a question, optionally with 2–3 choices."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints, field_validator

from bot.deferred import DeferredModel
from bot.protocol import InputOption
from bot.tools import ToolContext, tool

MAX_TIMEOUT_MINUTES = 7 * 24 * 60
Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]


class QuestionOption(DeferredModel):
    model_config = ConfigDict(extra="forbid")

    label: Label = Field(description="The choice as the person sees it: 1 to 5 words.")
    description: Annotated[str, StringConstraints(max_length=200)] | None = None

    @field_validator("label")
    @classmethod
    def short_label(cls, value: str) -> str:
        if not 1 <= len(value.split()) <= 5:
            raise ValueError("an option label must be 1 to 5 words")
        return value


class Question(DeferredModel):
    model_config = ConfigDict(extra="forbid")

    question: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
    options: list[QuestionOption] | None = Field(
        default=None, description="2 or 3 choices; omit for an open question. People may always type their own."
    )
    timeout_minutes: int | None = Field(
        default=None, ge=1, le=MAX_TIMEOUT_MINUTES,
        description="Only if the answer is useless after a while: stop waiting after this many minutes "
                    "(at most a week) and carry on without it.",
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
    timeout = timedelta(minutes=args.timeout_minutes) if args.timeout_minutes else None
    answer = await ctx.ask(args.question, options=options, allow_free_text=True, timeout=timeout)
    if answer.status == "interrupted":
        return {"interrupted": True}
    if answer.status == "expired":
        return {"status": "expired", "message": f"Nobody answered within {args.timeout_minutes} minutes."}
    if answer.status == "unavailable":
        return {"status": "unavailable"}
    return {"status": "answered", "answer": answer.value}
