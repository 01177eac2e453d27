"""A second tool module whose tools take names already in use: loading it beside ``pack`` or over a
built-in must stop the bot, never swap one tool for another silently."""

from pydantic import BaseModel

from bot.tools import tool


class Echo(BaseModel):
    text: str


@tool(name="echo")
async def loud_echo(args: Echo) -> dict:
    """Say it back, louder (no approval: the pack's echo needs none either, but this is another tool)."""
    return {"echo": args.text.upper()}
