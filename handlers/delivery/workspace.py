"""What tools may do in Slack (``ctx.workspace``): post a message to a channel of the session's workspace.

The runtime binds the workspace to the session (``bot.tools.SessionWorkspace``), so a tool cannot post
into another tenant whatever its input says. The text goes out as plain words: ``<!channel>``,
``<@U…>`` and links written by the model read as "@channel", "@alice" (names from ``users.info``), never
acted on, and a last line says who asked for the post and who approved it (``blocks.announcements``). Slack's refusals come back as a
``WorkspaceError`` that says what to do, for the tool to hand to the model.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError

from blocks.announcements import announcement_text, user_ids_in
from blocks.limits import MESSAGE_TEXT, escape_mrkdwn, truncate_mrkdwn
from bot.ports import PostedMessage, WorkspaceError
from bot.principals import Principal
from bot.session import SessionRef, slack_session_id
from handlers.shared.admins import AdminCheck
from handlers.shared.deps import ClientFor

log = logging.getLogger(__name__)


def _why(error: str, channel: str) -> str:
    where = channel if channel.startswith(("#", "C", "G")) else f"#{channel}"
    reasons = {
        "channel_not_found": f"There is no channel {where} the agent can see. Check the name.",
        "not_in_channel": f"The agent is not a member of {where}. Someone there can add it with /invite @agent.",
        "is_archived": f"{where} is archived, so nothing can be posted there.",
        "restricted_action": f"Posting in {where} is restricted to some members, and the agent is not one.",
        "msg_too_long": "The message is too long for Slack.",
    }
    return reasons.get(error, f"Slack refused the post ({error}).")


class SlackWorkspace:
    """``bot.ports.Workspace`` over the Web API, with the workspace's own token."""

    def __init__(self, client_for: ClientFor) -> None:
        self.client_for = client_for
        self.people = AdminCheck(client_for)  # users.info with a short cache: names for the post

    async def post_message(self, team_id: str | None, channel: str, text: str, *,
                           asked_by: Principal | None = None, approved_by: Principal | None = None) -> PostedMessage:
        if not team_id:
            raise WorkspaceError("This conversation has no workspace to post in.")
        client: Any = await self.client_for(team_id)
        asker = asked_by.slack_user_id if asked_by else None
        approver = approved_by.slack_user_id if approved_by else None
        names = await self._names(team_id, [*user_ids_in(text), *(u for u in (asker, approver) if u)])
        body = announcement_text(text, names, asked_by=asker, approved_by=approver)
        try:
            # link_names off: "@channel" and "@alice" in the text stay words, nobody is notified
            sent = await client.chat_postMessage(channel=channel, text=body, link_names=False,
                                                 unfurl_links=False, unfurl_media=False)
        except SlackApiError as exc:
            error = str(exc.response.get("error"))
            log.info("a tool's post to %s in %s was refused: %s", channel, team_id, error)
            raise WorkspaceError(_why(error, channel)) from None
        posted = PostedMessage(channel=sent["channel"], ts=sent["ts"])
        posted.permalink = await self._permalink(client, posted)
        return posted

    async def start_thread(self, team_id: str | None, channel: str, *, owner: Principal, prompt: str) -> SessionRef:
        """A scheduled turn's thread: a message saying whose schedule it is, and the session it roots."""
        if not team_id:
            raise WorkspaceError("This schedule has no workspace to post in.")
        client: Any = await self.client_for(team_id)
        who = f"<@{owner.slack_user_id}>" if owner.slack_user_id else "someone"
        text = f":alarm_clock: Scheduled by {who}: {escape_mrkdwn(prompt)}"
        try:
            sent = await client.chat_postMessage(channel=channel, text=truncate_mrkdwn(text, MESSAGE_TEXT),
                                                 unfurl_links=False, unfurl_media=False)
        except SlackApiError as exc:
            raise WorkspaceError(_why(str(exc.response.get("error")), channel)) from None
        return SessionRef(session_id=slack_session_id(team_id, sent["channel"], sent["ts"]), team_id=team_id,
                          channel={"channel_id": sent["channel"], "thread_ts": sent["ts"]})

    async def _names(self, team_id: str, user_ids: list[str]) -> dict[str, str]:
        """Handles of the people a post names (an unknown one reads "someone"); failures are logged there."""
        people = await self.people.users(team_id, user_ids)
        return {uid: user.name for uid, user in people.items() if user.name and user.state == "active"}

    async def _permalink(self, client: Any, posted: PostedMessage) -> str | None:
        try:
            return (await client.chat_getPermalink(channel=posted.channel, message_ts=posted.ts))["permalink"]
        except Exception:  # noqa: BLE001 - the post stands without its link
            log.info("no permalink for the post %s in %s", posted.ts, posted.channel)
            return None
