"""Built-in tools, registered in every runtime."""

from bot.builtin.ask_question import ask_question

BUILTIN_TOOLS = [ask_question]

__all__ = ["BUILTIN_TOOLS", "ask_question"]
