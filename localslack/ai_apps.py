"""Slack's Agents & AI Apps surface: assistant threads, their live status, and streamed messages.

Web API methods (``AiAppMethods``), with the argument names, errors, scopes and tiers of their reference
pages on docs.slack.dev (``reference/methods/<method>``; tiers and scopes in ``localslack.methods``):

- ``assistant.threads.setStatus`` (channel_id, thread_ts, status, loading_messages ≤ 10): the "is thinking…"
  line under a thread. ``""`` clears it; so does the app's next message in the thread (Slack: "a two minute
  timeout applies, which will cause the status to be removed if no message has been sent"). Since
  2026-03-05 it also works in channel threads with ``chat:write`` (changelog "set status scope update").
  A group DM is not a conversation it supports here (``method_not_supported_for_channel_type``).
- ``assistant.threads.setSuggestedPrompts`` (channel_id, thread_ts, prompts [{title, message}] ≤ 4, title) and
  ``assistant.threads.setTitle`` (channel_id, thread_ts, title): the split view's prompts and title.
- ``chat.startStream`` (channel, thread_ts, markdown_text ≤ 12,000, recipient_user_id / recipient_team_id
  "required when streaming to channels"), ``chat.appendStream`` (channel, ts, markdown_text ≤ 12,000) and
  ``chat.stopStream`` (channel, ts, markdown_text, blocks, metadata): a message that grows as the model
  writes; appends to a stopped one answer ``message_not_in_streaming_state``. ``chunks`` instead of
  ``markdown_text`` (both: ``cannot_provide_both_markdown_text_and_chunks``): ``markdown_text`` {text},
  ``task_update`` {id, title, status: pending | in_progress | complete | error, details, output, sources} (the
  same id replaces the task), ``plan_update`` {title}, ``blocks``; a bad one is ``invalid_arguments`` with a
  json-pointer. ``startStream``'s ``task_display_mode`` is ``timeline`` (default) or ``plan``; the stopped
  message holds its tasks as one ``plan`` block or a ``task_card`` block each, before its text.
  ``Workspace.stream_tasks_refusal`` plays a workspace that refuses task chunks (an older one).

What people do (``AiAppActions``, mixed into ``LocalSlack``): open the assistant split view (Slack sends
``assistant_thread_started``), look at another channel with it open (``assistant_thread_context_changed``),
and click an answer's feedback buttons (a ``block_actions`` with a ``feedback_buttons`` action).
"""

from __future__ import annotations

import time
from typing import Any

from localslack import payloads
from localslack.api_base import MethodGroup
from localslack.api_request import Handler, Params
from localslack.errors import ApiError, error_messages
from localslack.models import AssistantThread, Channel, DeliveryResult, Message
from localslack.workspace import Workspace

LOADING_MESSAGES_MAX = 10  # setStatus: "Maximum of 10 messages"
PROMPTS_MAX = 4  # setSuggestedPrompts: the split view shows up to four
MARKDOWN_TEXT_MAX = 12_000  # chat.*Stream: "Limit this field to 12,000 characters"
STATUS_TIMEOUT_S = 120.0
SESSION_STATUSES = ("processing", "active", "suspended", "closed")  # agents.sessions.setStatus
SESSION_TITLE_MAX = 200


def thread_key(channel: str, thread_ts: str) -> str:
    return f"{channel}:{thread_ts}"


def assistant_thread(ws: Workspace, channel: str, thread_ts: str) -> AssistantThread:
    """The thread's AI-app state, created on first use (kept on the workspace: the UI shows it)."""
    threads = ws.assistant_threads
    key = thread_key(channel, thread_ts)
    if key not in threads:
        threads[key] = AssistantThread(channel=channel, thread_ts=thread_ts)
    return threads[key]


def current_status(ws: Workspace, channel: str, thread_ts: str) -> str:
    """The status shown under a thread now ("" when none: cleared, replaced by a reply, or timed out)."""
    found = ws.assistant_threads.get(thread_key(channel, thread_ts))
    if found is None or not found.status or time.time() - found.status_at > STATUS_TIMEOUT_S:
        return ""
    return found.status


def _invalid(*lines: str) -> ApiError:
    return ApiError("invalid_arguments", extra=error_messages(*lines))


class AiAppMethods(MethodGroup):
    """The Web API methods of assistant threads and streamed messages, on ``WebApi``'s workspace."""

    def handlers(self) -> dict[str, Handler]:
        return {
            "assistant.threads.setStatus": self.set_status,
            "assistant.threads.setSuggestedPrompts": self.set_suggested_prompts,
            "assistant.threads.setTitle": self.set_title,
            "chat.startStream": self.start_stream,
            "chat.appendStream": self.append_stream,
            "chat.stopStream": self.stop_stream,
            "agents.sessions.setStatus": self.session_set_status,
            "agents.sessions.rename": self.session_rename,
        }

    # ---- assistant threads ---------------------------------------------------------------------------

    def _thread(self, p: Params, *, required: bool = True) -> tuple[Channel, str]:
        if p.text("channel_id") is None:
            raise _invalid("missing required field: channel_id")
        channel = self._resolve_channel(p, "channel_id")
        thread_ts = p.text("thread_ts")
        if thread_ts is None:
            if required:
                raise _invalid("missing required field: thread_ts")
            raise ApiError("missing_thread_ts")
        if self.ws.find_message(channel.id, thread_ts) is None:
            raise ApiError("invalid_thread_ts")
        return channel, thread_ts

    def set_status(self, p: Params) -> dict[str, Any]:
        channel, thread_ts = self._thread(p)
        status = p.values.get("status")
        if not isinstance(status, str):
            raise _invalid("missing required field: status")
        if channel.is_mpim:
            raise ApiError("method_not_supported_for_channel_type")
        loading = p.get("loading_messages", [])
        if not isinstance(loading, list) or not all(isinstance(m, str) and m for m in loading):
            raise _invalid("must be an array of strings [json-pointer:/loading_messages]")
        if len(loading) > LOADING_MESSAGES_MAX:
            raise _invalid(
                f"no more than {LOADING_MESSAGES_MAX} items allowed [json-pointer:/loading_messages]"
            )
        thread = assistant_thread(self.ws, channel.id, thread_ts)
        thread.status, thread.loading_messages = status, list(loading) if status else []
        thread.status_at = time.time()
        self.ws.touch()
        return {}

    def set_suggested_prompts(self, p: Params) -> dict[str, Any]:
        prompts = p.get("prompts")
        channel, thread_ts = self._thread(p, required=False)
        if not isinstance(prompts, list) or not prompts:
            raise _invalid("missing required field: prompts")
        if len(prompts) > PROMPTS_MAX:
            raise _invalid(f"no more than {PROMPTS_MAX} items allowed [json-pointer:/prompts]")
        for index, prompt in enumerate(prompts):
            if not isinstance(prompt, dict) or not all(
                isinstance(prompt.get(k), str) and prompt[k] for k in ("title", "message")
            ):
                raise _invalid(f"missing required field: title or message [json-pointer:/prompts/{index}]")
        thread = assistant_thread(self.ws, channel.id, thread_ts)
        thread.prompts = [{"title": pr["title"], "message": pr["message"]} for pr in prompts]
        thread.prompts_title = p.text("title") or ""
        self.ws.touch()
        return {}

    def set_title(self, p: Params) -> dict[str, Any]:
        channel, thread_ts = self._thread(p)
        title = p.text("title")
        if title is None:
            raise _invalid("missing required field: title")
        assistant_thread(self.ws, channel.id, thread_ts).title = title
        self.ws.touch()
        return {}

    # ---- agent sessions ------------------------------------------------------------------------------

    def _session(self, p: Params) -> AssistantThread:
        if self.ws.agent_sessions_refusal:  # e.g. the app is not declared as an agent
            raise ApiError(self.ws.agent_sessions_refusal)
        channel, thread_ts = self._thread(p)
        return assistant_thread(self.ws, channel.id, thread_ts)

    def session_set_status(self, p: Params) -> dict[str, Any]:
        """Creates the session if needed; ``title`` (≤ 200) and ``initiator_user_id`` are "only used when
        creating a new session; ignored if the session already exists" (rename changes a title)."""
        status = p.text("status")
        if status is None:
            raise _invalid("missing required field: status")
        if status not in SESSION_STATUSES:
            raise _invalid(f"must be one of {', '.join(SESSION_STATUSES)} [json-pointer:/status]")
        title = p.text("title")
        if title is not None and len(title) > SESSION_TITLE_MAX:
            raise _invalid(f"must be at most {SESSION_TITLE_MAX} characters [json-pointer:/title]")
        thread = self._session(p)
        if not thread.session_status:  # created now
            thread.session_title = title or ""
        thread.session_status = status
        thread.session_log.append({"status": status, "title": thread.session_title})
        self.ws.touch()
        return {"status": status, "title": thread.session_title}

    def session_rename(self, p: Params) -> dict[str, Any]:
        title = p.text("title")
        if not title:
            raise _invalid("missing required field: title")
        if len(title) > SESSION_TITLE_MAX:
            raise _invalid(f"must be at most {SESSION_TITLE_MAX} characters [json-pointer:/title]")
        thread = self._session(p)
        if not thread.session_status:
            raise ApiError("session_not_found")
        thread.session_title = title
        self.ws.touch()
        return {"title": title}

    # ---- streamed messages ---------------------------------------------------------------------------

    def _markdown(self, p: Params, *, required: bool, message: Message | None = None) -> str:
        """markdown_text, or the text of ``markdown_text`` chunks (both at once: refused); ``task_update`` and
        ``plan_update`` chunks are applied to ``message``."""
        text, chunks = p.text("markdown_text"), p.get("chunks")
        if text is not None and chunks:
            raise ApiError("cannot_provide_both_markdown_text_and_chunks")
        if chunks:
            if not isinstance(chunks, list) or not all(isinstance(c, dict) and c.get("type") for c in chunks):
                raise ApiError("invalid_chunks")
            for i, chunk in enumerate(chunks):
                _check_chunk(chunk, i)
            if self.ws.stream_tasks_refusal and any(c["type"] in TASK_CHUNKS for c in chunks):
                raise ApiError(self.ws.stream_tasks_refusal)
            text = "".join(str(c.get("text") or "") for c in chunks if c.get("type") == "markdown_text")
            if message is not None:
                for chunk in chunks:
                    _apply_chunk(message, chunk)
        has_tasks = any(c.get("type") in TASK_CHUNKS for c in chunks or [])
        if required and not text and not has_tasks:
            raise ApiError("markdown_text_or_chunks_required")
        if text and len(text) > MARKDOWN_TEXT_MAX:
            raise _invalid(
                f"must be less than {MARKDOWN_TEXT_MAX + 1} characters [json-pointer:/markdown_text]"
            )
        return text or ""

    def start_stream(self, p: Params) -> dict[str, Any]:
        channel = self._resolve_channel(p)
        thread_ts = p.text("thread_ts")
        if thread_ts is None:
            raise _invalid("missing required field: thread_ts")
        if channel.is_archived:
            raise ApiError("is_archived")
        if p.auth.user_id not in channel.members:
            raise ApiError("not_in_channel")
        if not channel.is_im:  # "Required when streaming to channels"
            if not p.text("recipient_user_id"):
                raise ApiError("missing_recipient_user_id")
            if not p.text("recipient_team_id"):
                raise ApiError("missing_recipient_team_id")
            self.ws.user(p.text("recipient_user_id"))
        mode = p.text("task_display_mode")
        if mode is not None and mode not in DISPLAY_MODES:
            raise _invalid("must be one of timeline, plan [json-pointer:/task_display_mode]")
        if mode is not None and self.ws.stream_tasks_refusal:
            raise ApiError(self.ws.stream_tasks_refusal)
        message = Message(
            channel=channel.id,
            ts=self.ws.clock.next(),
            user=p.auth.user_id,
            team=self._author_team(p, channel),
            bot_id=p.auth.bot_id,
            thread_ts=thread_ts,
            streaming=True,
            task_display_mode=mode or "timeline",
        )
        message.text = self._markdown(p, required=False, message=message)
        self.ws.add_message(message)  # a message from the app: its status under the thread goes
        return {"channel": channel.id, "ts": message.ts}

    def _streaming(self, p: Params) -> Message:
        channel = self._resolve_channel(p)
        message = self._message(p, channel.id, p.text("ts"))
        if message.bot_id != p.auth.bot_id or message.user != p.auth.user_id:
            raise ApiError("message_not_owned_by_app")
        if not message.streaming:
            raise ApiError("message_not_in_streaming_state")
        return message

    def append_stream(self, p: Params) -> dict[str, Any]:
        message = self._streaming(p)
        message.text += self._markdown(p, required=True, message=message)
        self.ws.touch()
        return {"channel": message.channel, "ts": message.ts}

    def stop_stream(self, p: Params) -> dict[str, Any]:
        message = self._streaming(p)
        message.text += self._markdown(p, required=False, message=message)
        extra = self._check_blocks(p) or []
        # what was streamed stays first (its tasks, then its text); blocks given at the stop are "rendered after" it
        message.blocks = (stream_blocks(message) + extra) or None
        if p.get("metadata"):
            message.metadata = p.get("metadata")
        message.streaming = False
        # the app's reply is complete: its status under the thread goes, as when it posts one
        thread = self.ws.assistant_threads.get(thread_key(message.channel, message.thread_ts or ""))
        if thread is not None:
            thread.status, thread.loading_messages = "", []
        self.ws.touch()
        rendered = message.to_slack(self._bot_profile(p.auth))
        return {"channel": message.channel, "ts": message.ts, "message": rendered}


TASK_CHUNKS = ("task_update", "plan_update")
CHUNK_TYPES = ("markdown_text", "task_update", "plan_update", "blocks")
TASK_STATUSES = ("pending", "in_progress", "complete", "error")
DISPLAY_MODES = ("timeline", "plan")


def _check_chunk(chunk: dict[str, Any], i: int) -> None:
    """A chunk as Slack's reference describes it (``markdown_text`` {text}, ``task_update`` {id, title, status,
    details?, output?, sources?}, ``plan_update`` {title}, ``blocks`` {blocks})."""
    where = f"/chunks/{i}"
    kind = chunk.get("type")
    if kind not in CHUNK_TYPES:
        raise _invalid(f"unsupported chunk type [json-pointer:{where}/type]")
    required = {"markdown_text": ("text",), "task_update": ("id", "title", "status"), "plan_update": ("title",),
                "blocks": ()}[kind]
    for name in required:
        if not isinstance(chunk.get(name), str) or not chunk[name]:
            raise _invalid(f"missing required field: {name} [json-pointer:{where}/{name}]")
    if kind == "task_update":
        if chunk["status"] not in TASK_STATUSES:
            raise _invalid(f"must be one of {', '.join(TASK_STATUSES)} [json-pointer:{where}/status]")
        for name in ("details", "output"):
            if chunk.get(name) is not None and not isinstance(chunk[name], str):
                raise _invalid(f"must be a string [json-pointer:{where}/{name}]")
    if kind == "markdown_text" and len(chunk["text"]) > MARKDOWN_TEXT_MAX:
        raise _invalid(f"must be less than {MARKDOWN_TEXT_MAX + 1} characters [json-pointer:{where}/text]")


def _apply_chunk(message: Message, chunk: dict[str, Any]) -> None:
    if chunk["type"] == "plan_update":
        message.plan_title = chunk["title"]
    elif chunk["type"] == "task_update":
        task = {k: chunk[k] for k in ("id", "title", "status", "details", "output", "sources") if chunk.get(k)}
        for i, known in enumerate(message.tasks):
            if known["id"] == task["id"]:
                message.tasks[i] = task  # the same id: its new state
                return
        message.tasks.append(task)


def _rich_text(text: str) -> dict[str, Any]:
    return {"type": "rich_text", "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}]}


def task_card(task: dict[str, Any]) -> dict[str, Any]:
    """A task as Slack's ``task_card`` block shows it."""
    card: dict[str, Any] = {"type": "task_card", "task_id": task["id"], "title": task["title"], "status": task["status"]}
    for name in ("details", "output"):
        if task.get(name):
            card[name] = _rich_text(task[name])
    return card


def stream_blocks(message: Message) -> list[dict[str, Any]]:
    """What a streamed message shows: its tasks (one ``plan`` block, or a ``task_card`` each in a timeline), then
    its text."""
    blocks: list[dict[str, Any]] = []
    if message.tasks and message.task_display_mode == "plan":
        blocks.append({"type": "plan", "title": message.plan_title or "Plan",
                       "tasks": [task_card(t) for t in message.tasks]})
    else:
        blocks.extend(task_card(t) for t in message.tasks)
    if message.text and len(message.text) <= MARKDOWN_TEXT_MAX:
        blocks.append({"type": "markdown", "block_id": f"stream-{message.ts}", "text": message.text})
    return blocks


class AiAppActions:
    """Mixed into ``LocalSlack`` (beside ``UserActions``): what a person does with the app's AI surface."""

    ws: Workspace

    async def open_assistant(
        self, user_id: str, *, context_channel: str | None = None
    ) -> tuple[str, str, DeliveryResult | None]:
        """``user_id`` opens the app's split view: a new thread in their DM with the app, and
        ``assistant_thread_started`` (with the channel they were looking at as its context). Returns
        (DM id, thread ts, the delivery)."""
        dm_id = self.dm_channel(user_id)  # type: ignore[attr-defined]
        installation = self.ws.installation_for(self.ws.channel(dm_id))
        if installation is None:
            raise ApiError("app_not_installed")
        root = Message(
            channel=dm_id,
            ts=self.ws.clock.next(),
            user=installation.bot_user_id or "",
            team=installation.id,
            bot_id=installation.bot_id,
            subtype="assistant_app_thread",
            text="New chat",
        )
        self.ws.add_message(root)
        thread = assistant_thread(self.ws, dm_id, root.ts)
        thread.user = user_id
        thread.context = self._context(user_id, context_channel)
        self.ws.touch()
        result = await self._send_assistant_event("assistant_thread_started", thread)
        return dm_id, root.ts, result

    async def change_assistant_context(
        self, user_id: str, dm_id: str, thread_ts: str, context_channel: str | None
    ) -> DeliveryResult | None:
        """With the split view open, ``user_id`` switches to another channel."""
        thread = assistant_thread(self.ws, dm_id, thread_ts)
        thread.context = self._context(user_id, context_channel)
        self.ws.touch()
        return await self._send_assistant_event("assistant_thread_context_changed", thread)

    def assistant_state(self, dm_id: str, thread_ts: str) -> AssistantThread:
        """What the split view shows for a thread: title, prompts, status (tests and the UI read it)."""
        thread = assistant_thread(self.ws, dm_id, thread_ts)
        thread.status = current_status(self.ws, dm_id, thread_ts)
        return thread

    async def click_feedback(
        self, user_id: str, channel_id: str, message_ts: str, *, positive: bool = True
    ) -> DeliveryResult:
        """``user_id`` clicks thumbs up (or down) on a message's feedback buttons."""
        user = self._user(user_id)  # type: ignore[attr-defined]
        target = self._target(user, (channel_id, message_ts))  # type: ignore[attr-defined]
        for block in target.blocks:
            for element in block.get("elements", []) if block.get("type") == "context_actions" else []:
                if element.get("type") == "feedback_buttons":
                    button = element["positive_button" if positive else "negative_button"]
                    action = {
                        "type": "feedback_buttons",
                        "action_id": element.get("action_id"),
                        "block_id": block.get("block_id"),
                        "text": button.get("text"),
                        "value": button.get("value"),
                        "action_ts": payloads.action_ts(),
                    }
                    return await self._send_action(user, target, action)  # type: ignore[attr-defined]
        raise ValueError(f"no feedback buttons on message {message_ts}")

    async def stop_agent_session(self, user_id: str, channel_id: str, thread_ts: str, *,
                                 late: bool = False) -> DeliveryResult | None:
        """``user_id`` clicks the stop button Slack shows under a ``processing`` session: Slack sends
        ``agent_session_stopped`` and leaves the status alone (the app moves it). ``late``: the click was
        made while it was processing and the event arrives only now, after the app moved on."""
        thread = self.ws.assistant_threads.get(thread_key(channel_id, thread_ts))
        if thread is None or (thread.session_status != "processing" and not late):
            raise ValueError(f"no stop button: the session in {channel_id}:{thread_ts} is not processing")
        channel = self.ws.channel(channel_id)
        installation = self.ws.installation_for(channel)
        if installation is None:
            return None
        event = {"type": "agent_session_stopped", "channel": channel_id, "thread_ts": thread_ts, "user": user_id,
                 "streaming_message_ts": [m.ts for m in self.ws.thread(channel_id, thread_ts)
                                          if m.streaming],
                 "event_ts": self.ws.clock.next()}
        return await self.deliverer.send_event(self._app_envelope(event, installation, channel))  # type: ignore[attr-defined]

    def _context(self, user_id: str, channel_id: str | None) -> dict[str, Any]:
        if channel_id is None:
            return {}
        channel = self.ws.channel(channel_id)
        org = self.ws.enterprise_of(channel.team_id)
        context: dict[str, Any] = {"channel_id": channel.id, "team_id": channel.team_id}
        if org is not None:
            context["enterprise_id"] = org.id
        return context

    async def _send_assistant_event(self, kind: str, thread: AssistantThread) -> DeliveryResult | None:
        channel = self.ws.channel(thread.channel)
        installation = self.ws.installation_for(channel)
        if installation is None:
            return None
        event = {
            "type": kind,
            "assistant_thread": {
                "user_id": thread.user,
                "context": dict(thread.context),
                "channel_id": thread.channel,
                "thread_ts": thread.thread_ts,
            },
            "event_ts": self.ws.clock.next(),
        }
        return await self.deliverer.send_event(self._app_envelope(event, installation, channel))  # type: ignore[attr-defined]


__all__ = ["AiAppActions", "AiAppMethods", "assistant_thread", "current_status"]
