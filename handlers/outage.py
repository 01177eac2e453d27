"""What a person sees when Redis cannot be reached while they click.

Slack does not retry interactivity requests (clicks, submissions, shortcuts, slash commands) and shows a
bare error for anything but a 2xx. So a request of theirs whose listener failed because the store was
unreachable is answered 200 within the ack, and the person alone reads :data:`TRY_AGAIN`: as the slash
command's own answer, as an error under a modal's first input (the modal stays open with what they
typed), or as an ephemeral message where they clicked (a direct message from App Home). Nothing was
recorded, so trying again is safe. Each is counted in ``hitl_slack_store_unavailable_total``.

Events are not answered here: their 5xx is what makes Slack deliver them again once Redis is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from slack_bolt.response import BoltResponse

from bot.ops.metrics import STORE_UNAVAILABLE
from handlers.delivery.private_notes import tell_privately
from handlers.metering import payload_type
from store.client import UNREACHABLE

log = logging.getLogger(__name__)

TRY_AGAIN = "I couldn't record that — try again in a moment."
# Slack retries events (a 5xx makes it deliver them again); these it never retries
PEOPLE = {"block_actions", "view_submission", "shortcut", "message_action", "slash_command"}

Spawn = Callable[..., Any]
READ_BUDGET_S = 1.5  # a click's store reads before its ack, at most: Slack gives up on the ack at 3 s


class StoreTooSlow(TimeoutError):
    """The store did not answer within a request's ack budget (a hung server, a network dropping packets)."""


STORE_DOWN = (*UNREACHABLE, StoreTooSlow)


@contextlib.asynccontextmanager
async def read_in_time(budget_s: float = READ_BUDGET_S) -> AsyncIterator[None]:
    """Bound the store reads a listener makes before its ack: a store that hangs is treated as one that
    is down (:class:`StoreTooSlow`), so the person hears "try again" before Slack gives up on the ack.
    Only for reads: a cancelled read leaves nothing half done."""
    try:
        async with asyncio.timeout(budget_s):
            yield
    except TimeoutError as exc:
        raise StoreTooSlow(f"no answer from the store within {budget_s} s") from exc


def store_down(error: BaseException | None) -> bool:
    """Whether ``error`` (or what caused it) is the store being unreachable."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, STORE_DOWN):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def answer_store_down(error: BaseException, body: Any, client: Any, spawn: Spawn) -> BoltResponse | None:
    """The 200 for a person's request that failed on an unreachable store, or None (not one of those)."""
    kind = payload_type(body)
    if kind not in PEOPLE or not store_down(error) or not isinstance(body, dict):
        return None
    STORE_UNAVAILABLE.labels(kind).inc()
    log.warning("Redis is unreachable: a %s was answered 'try again' (%s)", kind, type(error).__name__)
    if kind == "slash_command":  # the command's answer is shown to the person alone
        return BoltResponse(status=200, body={"response_type": "ephemeral", "text": TRY_AGAIN})
    if kind == "view_submission" and (block_id := _first_input(body)) is not None:
        return BoltResponse(status=200, body={"response_action": "errors", "errors": {block_id: TRY_AGAIN}})
    user = (body.get("user") or {}).get("id")
    if isinstance(user, str):
        spawn(_tell(client, body, user), what=f"tell {user} to try again")
    return BoltResponse(status=200, body="")


def _first_input(body: dict[str, Any]) -> str | None:
    for block in (body.get("view") or {}).get("blocks") or []:
        if isinstance(block, dict) and block.get("type") == "input" and isinstance(block.get("block_id"), str):
            return block["block_id"]
    return None


def _tell(client: Any, body: dict[str, Any], user: str) -> Coroutine[Any, Any, None]:
    from_home = (body.get("view") or {}).get("type") == "home"
    channel = None if from_home else (body.get("channel") or {}).get("id") or (
        body.get("container") or {}).get("channel_id")
    thread_ts = (body.get("message") or {}).get("thread_ts")
    return tell_privately(client, user, TRY_AGAIN, channel=channel, thread_ts=thread_ts)
