"""Slack's ``chat.*`` and ``reactions.*`` methods over the in-memory workspace, with Slack's limits
and refusals."""

from __future__ import annotations

import re
from typing import Any

from localslack.api_base import MethodGroup
from localslack.api_request import Handler, Params
from localslack.errors import ApiError
from localslack.models import Ephemeral, Message

POST_TEXT_MAX = 40_000
UPDATE_TEXT_MAX = 4_000
_EMOJI_NAME = re.compile(r"^[a-z0-9_+'\-]+$")


class ChatMethods(MethodGroup):
    """``chat.*`` and ``reactions.*``: messages the app posts, edits, deletes, links to and reacts to."""

    def handlers(self) -> dict[str, Handler]:
        return {
            "chat.postMessage": self.chat_post_message,
            "chat.update": self.chat_update,
            "chat.postEphemeral": self.chat_post_ephemeral,
            "chat.delete": self.chat_delete,
            "chat.getPermalink": self.chat_get_permalink,
            "reactions.add": self.reactions_add,
            "reactions.remove": self.reactions_remove,
        }

    def chat_post_message(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p, names_ok=True)
        if channel.is_archived:
            raise ApiError("is_archived")
        if p.auth.user_id not in channel.members:
            raise ApiError("not_in_channel")
        text = p.text("text") or ""
        markdown_text = p.text("markdown_text")
        if markdown_text and (text or p.get("blocks") is not None):
            raise ApiError("markdown_text_conflict")
        text = text or markdown_text or ""
        if not text and p.get("blocks") is None and not p.get("attachments"):
            raise ApiError("no_text")
        if len(text) > POST_TEXT_MAX:
            raise ApiError("msg_too_long")
        blocks = self._check_blocks(p)
        message = Message(
            channel=channel.id,
            ts=self.ws.clock.next(),
            user=p.auth.user_id,
            team=self._author_team(p, channel),
            text=text,
            blocks=blocks,
            attachments=p.get("attachments") or None,
            bot_id=p.auth.bot_id,
            thread_ts=p.text("thread_ts"),
            metadata=p.get("metadata") or None,
        )
        if message.thread_ts and p.flag("reply_broadcast"):
            message.subtype = "thread_broadcast"
        self.ws.add_message(message)
        self._notify("posted", message)
        rendered = message.to_slack(self._bot_profile(p.auth))
        for key in (
            "reply_count",
            "reply_users",
            "reply_users_count",
            "latest_reply",
            "is_locked",
            "subscribed",
        ):
            rendered.pop(key, None)
        return {"channel": channel.id, "ts": message.ts, "message": rendered}

    def chat_update(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        if channel.is_archived:
            raise ApiError("is_inactive")  # "cannot be edited within a frozen, archived or deleted channel"
        message = self._message(p, channel.id, p.text("ts"))
        if message.user != p.auth.user_id:
            raise ApiError("cant_update_message")
        text = p.text("text")
        if text is None and p.get("blocks") is None and p.get("attachments") is None:
            raise ApiError("no_text")
        if text is not None and len(text) > UPDATE_TEXT_MAX:
            raise ApiError("msg_too_long")
        blocks = self._check_blocks(p)
        previous = message.to_slack()
        if text is not None:
            message.text = text
        if blocks is not None:  # omitted keeps the old blocks; [] removes them (Slack's rule)
            message.blocks = blocks or None
        if p.get("attachments") is not None:
            message.attachments = p.get("attachments") or None
        if p.get("metadata") is not None:
            message.metadata = p.get("metadata") or None
        message.edited = {"user": p.auth.user_id, "ts": self.ws.clock.next()}
        self.ws.touch()
        self._notify("changed", message, previous)
        rendered = message.to_slack(self._bot_profile(p.auth))
        rendered.pop("ts", None)
        return {"channel": channel.id, "ts": message.ts, "text": message.text, "message": rendered}

    def chat_post_ephemeral(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p, names_ok=True)
        if channel.is_archived:
            raise ApiError("is_archived")
        user_id = p.text("user", required=True)
        self.ws.user(user_id)
        if p.auth.user_id not in channel.members:
            raise ApiError("not_in_channel")
        if user_id not in channel.members:
            raise ApiError("user_not_in_channel")
        text = p.text("text") or ""
        if not text and p.get("blocks") is None and not p.get("attachments"):
            raise ApiError("no_text")
        if len(text) > POST_TEXT_MAX:
            raise ApiError("msg_too_long")
        blocks = self._check_blocks(p)
        ephemeral = Ephemeral(
            channel=channel.id,
            ts=self.ws.clock.next(),
            user=str(user_id),
            text=text,
            blocks=blocks,
            attachments=p.get("attachments") or None,
            thread_ts=p.text("thread_ts"),
            bot_id=p.auth.bot_id,
            sender=p.auth.user_id,
            sender_name=self.ws.user(p.auth.user_id).name,
        )
        self.ws.add_ephemeral(ephemeral)
        return {"message_ts": ephemeral.ts}

    def chat_delete(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        message = self._message(p, channel.id, p.text("ts"))
        if message.user != p.auth.user_id:
            raise ApiError("cant_delete_message")
        previous = message.to_slack()
        self.ws.delete_message(message)
        self._notify("deleted", message, previous)
        return {"channel": channel.id, "ts": message.ts}

    def chat_get_permalink(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        message = self._message(p, channel.id, p.text("message_ts", required=True))
        link = f"{self.ws.base_url}/archives/{channel.id}/p{message.ts.replace('.', '')}"
        if message.is_reply:
            link += f"?thread_ts={message.thread_ts}&cid={channel.id}"
        return {"channel": channel.id, "permalink": link}

    def _reaction_target(self, p: Params) -> tuple[Message, str]:
        channel = self._resolve_channel(p)
        name = (p.text("name", required=True) or "").strip(":")
        if not _EMOJI_NAME.match(name):
            raise ApiError("invalid_name")
        timestamp = p.text("timestamp")
        if not timestamp:
            raise ApiError("no_item_specified")
        return self._message(p, channel.id, timestamp), name

    def reactions_add(self, p: Params) -> dict[str, Any]:
        if self._resolve_channel(p).is_archived:
            raise ApiError("is_archived")
        message, name = self._reaction_target(p)
        self.ws.add_reaction(message, name, p.auth.user_id)
        return {}

    def reactions_remove(self, p: Params) -> dict[str, Any]:
        message, name = self._reaction_target(p)
        self.ws.remove_reaction(message, name, p.auth.user_id)
        return {}
