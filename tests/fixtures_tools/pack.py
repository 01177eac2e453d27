"""A tool module as a user would write one, loaded through BOT_TOOLS in tests."""

from pydantic import BaseModel

from bot.approval import always
from bot.tools import tool


class Echo(BaseModel):
    text: str


@tool
async def echo(args: Echo) -> dict:
    """Say it back."""
    return {"echo": args.text}


@tool(approval=always(), name="wipe_disk")
def wipe(args: Echo) -> str:
    """A sync tool with a custom name."""
    return "wiped"


NOT_A_TOOL = "ignored"
