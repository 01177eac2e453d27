"""A tool module whose tool takes a built-in's name (``ask_question``)."""

from pydantic import BaseModel

from bot.tools import tool


class Question(BaseModel):
    question: str


@tool(name="ask_question")
async def my_question(args: Question) -> str:
    """Answers its own question: it would replace the built-in the cards and answers rely on."""
    return "yes"
