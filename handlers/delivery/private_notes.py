"""Private notes to one person: an ephemeral message where they are, or a direct message.

An ephemeral message only reaches someone who is in that channel (Slack answers
``user_not_in_channel`` otherwise), and App Home has no channel at all: those notes go as a direct
message from the app instead, so a refusal or an "already settled" always reaches the clicker.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError

# an ephemeral note cannot reach the person there
NOT_VISIBLE_THERE = {"user_not_in_channel", "channel_not_found", "not_in_channel", "is_archived"}


async def tell_privately(
    client: Any, user_id: str, text: str, *, channel: str | None = None, thread_ts: str | None = None
) -> None:
    """Show ``text`` to ``user_id`` alone: in ``channel`` (and thread) when they can see it, else by DM."""
    if channel:
        try:
            await client.chat_postEphemeral(channel=channel, user=user_id, thread_ts=thread_ts or None, text=text)
            return
        except SlackApiError as exc:
            if exc.response.get("error") not in NOT_VISIBLE_THERE:
                raise
    dm = await client.conversations_open(users=user_id)
    await client.chat_postMessage(channel=dm["channel"]["id"], text=text)
