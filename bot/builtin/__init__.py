"""Built-in tools, registered in every runtime."""

from bot.builtin.ask_question import ask_question
from bot.builtin.request_info import request_info

BUILTIN_TOOLS = [ask_question, request_info]

__all__ = ["BUILTIN_TOOLS", "ask_question", "request_info"]
