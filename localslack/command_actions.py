"""Slash commands, and what the bot sends back to a ``response_url`` (an ephemeral, a message in the
channel, or a change to the message the interaction came from)."""

from __future__ import annotations

from typing import Any

from localslack import blockkit, payloads
from localslack.actions import UserActions
from localslack.credentials import ResponseUrl
from localslack.errors import ApiError
from localslack.models import DeliveryResult, Ephemeral, Message


class CommandActions(UserActions):
    """Mixed into ``LocalSlack``: a person runs a slash command; the bot answers on its response_url."""

    async def slash_command(
        self, user_id: str, command: str, text: str = "", channel_id: str = "C0GENERAL"
    ) -> DeliveryResult:
        """``user_id`` runs ``command`` (e.g. "/approvers") in ``channel_id``; the ack body is shown to them
        (ephemeral unless response_type is in_channel); a failed delivery shows Slackbot's error."""
        user = self._user(user_id)
        channel = self._channel(channel_id)
        command = command if command.startswith("/") else f"/{command}"
        installation = self._installation(channel, user)
        response_url = self.ws.issue_response_url(
            ResponseUrl(team_id=installation.id, user_id=user.id, channel_id=channel.id)
        )
        fields = payloads.slash_command(
            user=user,
            installation=installation,
            channel=channel,
            command=command,
            text=text,
            response_url=response_url,
            trigger_id=self.ws.issue_trigger(user.id, installation.id),
            org=self.ws.enterprise_of(installation.id),
        )
        result = await self.deliverer.send_command(fields)
        if not result.ok:
            reason = "operation_timeout" if result.error == "http_timeout" else "dispatch_failed"
            self._slackbot_notice(user.id, channel.id, f'{command} failed with the error "{reason}"')
            return result
        ack = result.ack_json()
        if isinstance(ack, dict) and (ack.get("text") or ack.get("blocks")):
            self.apply_response(
                ResponseUrl(team_id=installation.id, user_id=user.id, channel_id=channel.id), ack
            )
        elif ack is None and result.body.strip():
            self.apply_response(
                ResponseUrl(team_id=installation.id, user_id=user.id, channel_id=channel.id),
                {"text": result.body},
            )
        return result

    def _slackbot_notice(self, user_id: str, channel_id: str, text: str) -> None:
        notice = Ephemeral(
            channel=channel_id,
            ts=self.ws.clock.next(),
            user=user_id,
            text=text,
            sender="USLACKBOT",
            sender_name="Slackbot",
        )
        self.ws.add_ephemeral(notice)

    def apply_response(self, context: ResponseUrl, body: dict[str, Any]) -> None:
        """Apply a response_url / command-ack body: delete_original, replace_original, in_channel or ephemeral."""
        blocks = body.get("blocks")
        if blocks is not None:
            errors = blockkit.validate_blocks(blocks)
            if errors:
                raise ApiError("invalid_blocks", status=400, extra={"errors": errors})
        installation = self.ws.team(context.team_id)
        original_message = (
            self.ws.find_message(context.channel_id, context.message_ts)
            if context.channel_id and context.message_ts and not context.is_ephemeral
            else None
        )
        original_ephemeral = (
            self.ws.find_ephemeral(context.user_id, context.channel_id, context.message_ts)
            if context.channel_id and context.is_ephemeral
            else None
        )
        if _flag(body.get("delete_original")):
            if original_ephemeral is not None:
                self.ws.remove_ephemeral(original_ephemeral)
            elif original_message is not None:
                self.ws.delete_message(original_message)
            return
        if _flag(body.get("replace_original")) and (original_ephemeral or original_message):
            original = original_ephemeral or original_message
            assert original is not None
            original.text = str(body.get("text") or "")
            original.blocks = blocks
            if body.get("attachments") is not None:
                original.attachments = body.get("attachments")
            self.ws.touch()
            return
        thread_ts = body.get("thread_ts") or context.thread_ts
        if body.get("response_type") == "in_channel" and context.channel_id:
            message = Message(
                channel=context.channel_id,
                ts=self.ws.clock.next(),
                user=installation.bot_user_id or "",
                team=installation.id,
                text=str(body.get("text") or ""),
                blocks=blocks,
                attachments=body.get("attachments"),
                bot_id=installation.bot_id,
                thread_ts=thread_ts,
            )
            self.ws.add_message(message)
            return
        ephemeral = Ephemeral(
            channel=context.channel_id or self.dm_channel(context.user_id),
            ts=self.ws.clock.next(),
            user=context.user_id,
            text=str(body.get("text") or ""),
            blocks=blocks,
            attachments=body.get("attachments"),
            thread_ts=thread_ts,
            bot_id=installation.bot_id,
            sender=installation.bot_user_id,
        )
        self.ws.add_ephemeral(ephemeral)


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1")
