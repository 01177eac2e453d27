"""How a post is found in its thread when where it landed was never recorded (the deliverer died, its answer was
lost, or another deliverer made it): the message metadata written with every post, and the look for it.

A mark names the post by its post ledger field and by the time of the event it shows. The time tells a
session's lives apart: after the retention a thread used again numbers its events from 1 again, so the old
life's answer has the new answer's field, never its event's time.

A claim (``claimed:<time>``) in the post ledger says a post may have been made: whoever finds one looks in the
thread before posting (``handlers.delivery.channel``). ``UNSURE`` is a claim from long ago: a post that someone
may have made, to be looked for at once.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError

from blocks.actions import request_id_of_block
from bot.protocol import Event

POST_MARK = "hitl_post"  # message metadata event type: lets a retry find a post whose answer was lost
CLAIMED = "claimed"
UNSURE = f"{CLAIMED}:0"  # maybe posted, by whoever: look in the thread before posting
# Slack's answers that mean "try again later": a look it could not answer is no proof the post is absent
TRANSIENT_ERRORS = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}


def event_time(event: Event) -> int:
    """What tells this event's posts from those of the session's other lives: its time, in ms."""
    return int(event.at.timestamp() * 1000)


def post_mark(field: str, at: int | None = None) -> dict[str, Any]:
    """The metadata that names a message by its post ledger field (and its event's time, ``at``)."""
    return {
        "event_type": POST_MARK,
        "event_payload": {"post": field, **({"at": at} if at is not None else {})},
    }


def transient(exc: SlackApiError) -> bool:
    error = exc.response.get("error")
    return exc.response.status_code == 429 or exc.response.status_code >= 500 or error in TRANSIENT_ERRORS


async def find_post(
    client: Any,
    channel: str,
    thread_ts: str | None,
    field: str,
    *,
    at: int | None = None,
    request_id: str | None = None,
) -> dict[str, str] | None:
    """Where the post marked ``field`` (of the event at ``at``; a card: holding ``request_id``'s blocks) is in
    the conversation, or None. Slack rate limited or down raises: what could not be seen is not taken for
    absent (the delivery is retried, and looks again)."""
    try:
        if thread_ts:
            resp = await client.conversations_replies(
                channel=channel, ts=thread_ts, limit=200, include_all_metadata=True
            )
        else:
            resp = await client.conversations_history(channel=channel, limit=200, include_all_metadata=True)
    except SlackApiError as exc:
        if transient(exc):
            raise
        return None  # never to be seen (no history scope, not in the channel): posting is the only way on
    for message in resp.get("messages", []):
        payload = (message.get("metadata") or {}).get("event_payload") or {}
        marked = payload.get("post") == field and (at is None or payload.get("at") == at)
        by_card = request_id is not None and any(
            request_id_of_block(b.get("block_id")) == request_id for b in message.get("blocks") or []
        )
        if marked or by_card:
            return {"channel": channel, "ts": message["ts"]}
    return None
