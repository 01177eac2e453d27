"""What the assistant split view shows when a thread opens: a greeting naming the person, and suggested
prompts drawn from the tools the bot has loaded (``assistant.threads.setSuggestedPrompts`` wire shape:
``[{title, message}]``, at most four). Pure functions: no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from blocks.limits import one_line, truncate

PROMPTS_MAX = 4  # the split view shows up to four
PROMPT_TITLE = 40  # they show as chips: keep titles short
TITLE_CHARS = 60  # a thread's title, from its first request
PROMPTS_TITLE = "Try asking"


def _first_sentence(description: str) -> str:
    line = one_line(description.strip().splitlines()[0] if description.strip() else "")
    return line.split(". ")[0].rstrip(".")


def _short(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut between words (a chip reads badly cut mid-word)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return f"{cut}…"


class ToolSummary(NamedTuple):
    name: str
    description: str
    example: str | None = None  # a request a person might type (``@tool(example=…)``)


def suggested_prompts(tools: Iterable[tuple[str, ...]]) -> list[dict[str, str]]:
    """One prompt per tool (name, description[, example]), the first four that say something: the tool's
    example request as it is (it names a real customer, charge…), else one made from its description."""
    prompts: list[dict[str, str]] = []
    for summary in tools:
        tool = ToolSummary(*summary)
        what = _first_sentence(tool.description)
        if tool.example:
            prompts.append({"title": _short(one_line(tool.example), PROMPT_TITLE), "message": tool.example})
        elif what:
            prompts.append({"title": _short(what, PROMPT_TITLE), "message": f"I'd like to {what[0].lower()}{what[1:]}."})
        else:
            continue
        if len(prompts) == PROMPTS_MAX:
            break
    return prompts


def greeting(user_id: str | None, tools: Iterable[tuple[str, ...]]) -> str:
    """The first message of a new assistant thread."""
    who = f"Hi <@{user_id}>!" if user_id else "Hi!"
    can = [_first_sentence(t[1]).lower() for t in tools if _first_sentence(t[1])][:3]
    does = f" I can {', '.join(can)} and more." if can else ""
    return (
        f"{who}{does} When something needs a person's approval, I ask here and wait: the card says who "
        "may approve, and nothing runs until they do."
    )


def thread_title(first_request: str) -> str:
    return truncate(one_line(first_request), TITLE_CHARS) or "New chat"
