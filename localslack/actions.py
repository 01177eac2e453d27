"""What people do in the workspace, and what Slack then sends the bot.

``UserActions`` is the Python API that tests and the browser UI share: post a message, click a button,
pick an option; ``localslack.view_actions`` adds submitting a modal and opening App Home,
``localslack.command_actions`` slash commands and response_urls. Each stores what Slack would store,
delivers the signed request, and applies the bot's HTTP answer (ack bodies of commands and view
submissions) the way Slack does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from localslack import blockkit, payloads
from localslack.composer import new_client_msg_id, rich_text_blocks
from localslack.credentials import ResponseUrl
from localslack.delivery import Deliverer
from localslack.errors import ApiError
from localslack.models import Channel, DeliveryResult, Ephemeral, Message, Team, User, View
from localslack.workspace import Workspace

Surface = str | tuple[str, str]  # a view id ("V…") or (channel_id, message_ts)


class LocalSlackError(ValueError):
    """A test or the UI asked for something the workspace cannot do (unknown user, element, view…)."""


@dataclass
class _Target:
    """Where an interactive element lives: a message, an ephemeral, or a view."""

    blocks: list[dict[str, Any]]
    installation: Team
    channel: Channel | None = None
    message: Message | None = None
    ephemeral: Ephemeral | None = None
    view: View | None = None
    state_key: tuple[str, ...] = field(default_factory=tuple)


class UserActions:
    """Mixed into ``LocalSlack``; needs ``self.ws`` and ``self.deliverer``."""

    ws: Workspace
    deliverer: Deliverer
    _message_state: dict[tuple[str, ...], dict[str, dict[str, Any]]]
    _background: set[asyncio.Task[Any]]

    # ---- lookups -------------------------------------------------------------------------------------

    def _user(self, user_id: str) -> User:
        try:
            return self.ws.user(user_id)
        except ApiError as exc:
            raise LocalSlackError(f"unknown user {user_id!r}") from exc

    def _channel(self, channel_id: str) -> Channel:
        try:
            return self.ws.channel(channel_id)
        except ApiError as exc:
            raise LocalSlackError(f"unknown channel {channel_id!r}") from exc

    def _installation(self, channel: Channel | None, user: User) -> Team:
        team = self.ws.installation_for(channel) if channel else None
        if team is None:
            team = self.ws.teams.get(user.team_id)
        if team is None or not team.installed:
            team = next((t for t in self.ws.teams.values() if t.installed), None)
        if team is None:
            raise LocalSlackError("the app is not installed in any team")
        return team

    def dm_channel(self, user_id: str, team_id: str | None = None) -> str:
        """The id of ``user_id``'s DM with the bot (created on first use)."""
        user = self._user(user_id)
        if team_id is None:
            own_team = self.ws.teams.get(user.team_id)
            team_id = own_team.id if own_team and own_team.installed else self._installation(None, user).id
        return self.ws.dm_channel(user.id, team_id).id

    # ---- messages ------------------------------------------------------------------------------------

    async def post_message(
        self, user_id: str, channel_id: str, text: str, thread_ts: str | None = None
    ) -> tuple[str, list[DeliveryResult]]:
        """``user_id`` types ``text`` in ``channel_id`` (in a thread if ``thread_ts``); returns (ts, deliveries).

        The bot receives ``app_mention`` (channels, when ``<@BOT>`` is in the text) and ``message``
        (always, when the bot is in the channel), concurrently and each with its own event_id, as Slack does.
        """
        user = self._user(user_id)
        channel = self._channel(channel_id)
        if user.id not in channel.members:
            raise LocalSlackError(f"{user.name} is not a member of {channel.name or channel.id}")
        if channel.is_archived:
            raise LocalSlackError(f"#{channel.name or channel.id} is archived: nobody can post in it")
        if user.deleted:
            raise LocalSlackError(f"{user.name}'s account is deactivated")
        message = Message(
            channel=channel.id,
            ts=self.ws.clock.next(),
            user=user.id,
            team=user.team_id,
            text=text,
            blocks=rich_text_blocks(text),
            client_msg_id=new_client_msg_id(),
            thread_ts=thread_ts,
        )
        self.ws.add_message(message)
        return message.ts, await self._deliver_user_message(message, channel, user)

    async def _deliver_user_message(
        self, message: Message, channel: Channel, author: User
    ) -> list[DeliveryResult]:
        installation = self.ws.installation_for(channel)
        if installation is None:
            return []
        source_team = author.team_id if author.team_id in self.ws.teams else installation.id
        events = []
        if not channel.is_im and f"<@{installation.bot_user_id}>" in message.text:
            events.append(payloads.message_event(message, channel, author, event_type="app_mention"))
        events.append(payloads.message_event(message, channel, author))
        envelopes = [
            payloads.event_envelope(
                e,
                source_team_id=source_team,
                installation=installation,
                channel=channel,
                org=self.ws.enterprise_of(installation.id),
            )
            for e in events
        ]
        return list(await asyncio.gather(*(self.deliverer.send_event(e) for e in envelopes)))

    def echo_bot_message(self, kind: str, message: Message, previous: dict[str, Any] | None) -> None:
        """Deliver a bot's own post/edit/delete back to it as Slack does (message.* subscriptions)."""
        channel = self.ws.channels.get(message.channel)
        installation = self.ws.installation_for(channel) if channel else None
        if channel is None or installation is None:
            return
        event = payloads.bot_message_event(kind, message, channel, previous)
        self._spawn(self.deliverer.send_event(self._app_envelope(event, installation, channel)))

    def _app_envelope(self, event: dict[str, Any], installation: Team, channel: Channel | None) -> dict[str, Any]:
        """An event the installation's own workspace sends (not a person's message from a shared channel)."""
        return payloads.event_envelope(
            event,
            source_team_id=installation.id,
            installation=installation,
            channel=channel,
            org=self.ws.enterprise_of(installation.id),
        )

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- interactions --------------------------------------------------------------------------------

    def _target(self, user: User, surface: Surface) -> _Target:
        if isinstance(surface, str):
            view = self.ws.views.get(surface)
            if view is None or view.user_id != user.id or not self.ws.is_open(view):
                raise LocalSlackError(f"view {surface!r} is not open for {user.name}")
            installation = self.ws.team(view.team_id)
            return _Target(view.blocks, installation, view=view)
        channel_id, message_ts = surface
        channel = self._channel(channel_id)
        installation = self._installation(channel, user)
        message = self.ws.find_message(channel.id, message_ts)
        if message is not None:
            key = (user.id, channel.id, message.ts)
            return _Target(
                message.blocks or [], installation, channel=channel, message=message, state_key=key
            )
        ephemeral = self.ws.find_ephemeral(user.id, channel.id, message_ts)
        if ephemeral is not None:
            key = (user.id, channel.id, ephemeral.ts)
            return _Target(
                ephemeral.blocks or [], installation, channel=channel, ephemeral=ephemeral, state_key=key
            )
        raise LocalSlackError(f"no message {message_ts} in {channel.id} visible to {user.name}")

    @staticmethod
    def _element(
        target: _Target, action_id: str, block_id: str | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        found = blockkit.find_element(target.blocks, action_id, block_id)
        if found is None:
            raise LocalSlackError(
                f"no element with action_id {action_id!r}" + (f" in block {block_id!r}" if block_id else "")
            )
        return found

    def _state_of(self, target: _Target) -> dict[str, dict[str, Any]]:
        if target.view is not None:
            return target.view.state_values
        return self._message_state.setdefault(target.state_key, {})

    def _remember(self, target: _Target, block_id: str, action_id: str, value: dict[str, Any]) -> None:
        self._state_of(target).setdefault(block_id, {})[action_id] = value
        self.ws.touch()

    async def _send_action(self, user: User, target: _Target, action: dict[str, Any]) -> DeliveryResult:
        trigger_id = self.ws.issue_trigger(user.id, target.installation.id)
        if target.view is not None:
            payload = payloads.block_actions(
                user=user,
                installation=target.installation,
                actions=[action],
                trigger_id=trigger_id,
                state_values=target.view.state_values,
                view=target.view,
                org=self.ws.enterprise_of(target.installation.id),
            )
            return await self.deliverer.send_interaction(payload)
        assert target.channel is not None
        original = target.message or target.ephemeral
        assert original is not None
        response_url = self.ws.issue_response_url(
            ResponseUrl(
                team_id=target.installation.id,
                user_id=user.id,
                channel_id=target.channel.id,
                message_ts=original.ts,
                is_ephemeral=target.ephemeral is not None,
                thread_ts=original.thread_ts,
            )
        )
        message = None
        if target.message is not None:
            profile = self.ws.bot_profile(target.installation.id) if target.message.bot_id else None
            message = target.message.to_slack(profile)
        payload = payloads.block_actions(
            user=user,
            installation=target.installation,
            actions=[action],
            trigger_id=trigger_id,
            state_values=self._state_of(target),
            channel=target.channel,
            message=message,
            message_ts=original.ts,
            is_ephemeral=target.ephemeral is not None,
            response_url=response_url,
            org=self.ws.enterprise_of(target.installation.id),
        )
        return await self.deliverer.send_interaction(payload)

    async def click(
        self,
        user_id: str,
        channel_id: str,
        message_ts: str,
        action_id: str,
        *,
        value: str | None = None,
        block_id: str | None = None,
    ) -> DeliveryResult:
        """``user_id`` clicks the button ``action_id`` on a message (or one of their ephemerals)."""
        return await self._click(self._user(user_id), (channel_id, message_ts), action_id, value, block_id)

    async def click_in_view(
        self,
        user_id: str,
        view_id: str,
        action_id: str,
        value: str | None = None,
        *,
        block_id: str | None = None,
    ) -> DeliveryResult:
        """``user_id`` clicks the button ``action_id`` in an open modal or their App Home view."""
        return await self._click(self._user(user_id), view_id, action_id, value, block_id)

    async def _click(
        self, user: User, surface: Surface, action_id: str, value: str | None, block_id: str | None
    ) -> DeliveryResult:
        target = self._target(user, surface)
        block, element = self._element(target, action_id, block_id)
        if element.get("type") == "overflow":
            return await self._choose(user, target, block, element, value)
        if element.get("type") != "button":
            raise LocalSlackError(f"{action_id!r} is a {element.get('type')}, not a button")
        action: dict[str, Any] = {
            "action_id": action_id,
            "block_id": block.get("block_id"),
            "text": element.get("text"),
        }
        chosen = value if value is not None else element.get("value")
        if chosen is not None:
            action["value"] = chosen
        if element.get("style"):
            action["style"] = element["style"]
        action["type"] = "button"
        action["action_ts"] = payloads.action_ts()
        return await self._send_action(user, target, action)

    async def select(
        self,
        user_id: str,
        channel_id: str,
        message_ts: str,
        action_id: str,
        option_value: str | list[str],
        *,
        block_id: str | None = None,
    ) -> DeliveryResult:
        """Pick an option of a static_select / radio_buttons / overflow (list for multi-select / checkboxes)."""
        user = self._user(user_id)
        target = self._target(user, (channel_id, message_ts))
        block, element = self._element(target, action_id, block_id)
        result = await self._choose(user, target, block, element, option_value)
        assert result is not None  # message elements always dispatch
        return result

    async def select_in_view(
        self,
        user_id: str,
        view_id: str,
        action_id: str,
        option_value: str | list[str],
        *,
        block_id: str | None = None,
    ) -> DeliveryResult | None:
        """Pick an option in a modal/home view. Inside an input block (no dispatch_action) Slack only keeps
        the choice for the submission, so nothing is delivered and None is returned."""
        user = self._user(user_id)
        target = self._target(user, view_id)
        block, element = self._element(target, action_id, block_id)
        return await self._choose(user, target, block, element, option_value)

    async def select_users(
        self,
        user_id: str,
        surface: Surface,
        action_id: str,
        user_ids: list[str],
        *,
        block_id: str | None = None,
    ) -> DeliveryResult | None:
        """Choose people in a users_select / multi_users_select; ``surface`` is a view id or (channel_id, ts)."""
        user = self._user(user_id)
        target = self._target(user, surface)
        block, element = self._element(target, action_id, block_id)
        if element.get("type") not in ("users_select", "multi_users_select"):
            raise LocalSlackError(f"{action_id!r} is a {element.get('type')}, not a users select")
        for chosen in user_ids:
            self._user(chosen)
        answer: Any = (
            list(user_ids) if element["type"] == "multi_users_select" else (user_ids[0] if user_ids else None)
        )
        return await self._dispatch_choice(user, target, block, element, answer)

    async def set_input(
        self, user_id: str, view_id: str, block_id: str, action_id: str, value: Any
    ) -> DeliveryResult | None:
        """Type into / set any input element of an open view (kept for submission; dispatched if the
        block has ``dispatch_action``)."""
        user = self._user(user_id)
        target = self._target(user, view_id)
        block, element = self._element(target, action_id, block_id)
        return await self._dispatch_choice(user, target, block, element, value)

    async def _choose(
        self,
        user: User,
        target: _Target,
        block: dict[str, Any],
        element: dict[str, Any],
        option_value: Any,
    ) -> DeliveryResult | None:
        element_type = element.get("type")
        values = option_value if isinstance(option_value, list) else [option_value]
        has_options = bool(blockkit.all_options(element))
        for value in values:
            if has_options and value is not None and blockkit.find_option(element, str(value)) is None:
                known = [o.get("value") for o in blockkit.all_options(element)]
                raise LocalSlackError(
                    f"{element.get('action_id')!r} has no option {value!r} (options: {known})"
                )
        if element_type == "overflow":
            option = blockkit.find_option(element, str(option_value))
            action = self._action_base(block, element)
            action["selected_option"] = blockkit.selected_option_payload(option or {})
            action["action_ts"] = payloads.action_ts()
            return await self._send_action(user, target, action)
        return await self._dispatch_choice(user, target, block, element, option_value)

    @staticmethod
    def _action_base(block: dict[str, Any], element: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": element.get("type"),
            "action_id": element.get("action_id"),
            "block_id": block.get("block_id"),
        }

    async def _dispatch_choice(
        self, user: User, target: _Target, block: dict[str, Any], element: dict[str, Any], answer: Any
    ) -> DeliveryResult | None:
        """Remember the new value in the surface's state and, unless it sits in a non-dispatching input
        block, send block_actions carrying it."""
        value = blockkit.state_value(element, answer)
        block_id = str(block.get("block_id"))
        self._remember(target, block_id, str(element.get("action_id")), value)
        if block.get("type") == "input" and not block.get("dispatch_action"):
            return None
        action = self._action_base(block, element)
        action.update({k: v for k, v in value.items() if k != "type"})
        if element.get("placeholder"):
            action["placeholder"] = element["placeholder"]
        action["action_ts"] = payloads.action_ts()
        return await self._send_action(user, target, action)
