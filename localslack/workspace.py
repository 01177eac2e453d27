"""The in-memory Slack workspace: its state and the operations Slack performs on it.

Operations raise ``ApiError`` with Slack's error code; the Web API layer turns that into
``{"ok": false, "error": ...}``. Every change bumps ``version`` and wakes waiters (UI live updates,
``LocalSlack.wait_for``).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

from localslack.blockkit import block_elements
from localslack.credentials import TRIGGER_TTL_S, Auth, OAuthCode, ResponseUrl, TokenRotation, Trigger
from localslack.errors import ApiError, error_messages
from localslack.ids import TsClock, random_id
from localslack.models import (
    APP_ID,
    AssistantThread,
    Channel,
    Enterprise,
    Ephemeral,
    Message,
    Reaction,
    Team,
    User,
    View,
)
from localslack.seed import Seed, default_seed

MODAL_STACK_MAX = 3


def agent_user(user_id: str, team_id: str, bot_id: str | None, **org: str) -> User:
    """The app's bot user as Slack shows it in a workspace (``org``: its Enterprise Grid org)."""
    return User(id=user_id, team_id=team_id, name="agent", real_name="agent", title="AI agent", is_bot=True,
                bot_id=bot_id, color="2eb67d", **org)

class Workspace:
    """All teams, people, channels, messages and views of the local Slack."""

    def __init__(
        self,
        seed: Seed | None = None,
        *,
        trigger_ttl_s: float = TRIGGER_TTL_S,
        scopes: list[str] | None = None,
    ) -> None:
        seed = seed or default_seed()
        self.base_url = "http://127.0.0.1"
        self.trigger_ttl_s = trigger_ttl_s
        self.app_scopes = list(scopes) if scopes is not None else None  # what the app's manifest grants
        self.clock = TsClock()
        self.enterprises: dict[str, Enterprise] = {e.id: e.model_copy(deep=True) for e in seed.enterprises}
        self.teams: dict[str, Team] = {t.id: t.model_copy(deep=True) for t in seed.teams}
        self.users: dict[str, User] = {u.id: u.model_copy(deep=True) for u in seed.users}
        self.channels: dict[str, Channel] = {c.id: c.model_copy(deep=True) for c in seed.channels}
        self.history: dict[str, list[Message]] = {c: [] for c in self.channels}
        self.ephemerals: list[Ephemeral] = []
        self.views: dict[str, View] = {}
        self.home_views: dict[tuple[str, str], str] = {}  # (team_id, user_id) -> view id
        self.modal_stacks: dict[str, list[str]] = {}  # user_id -> view ids, bottom first
        self.triggers: dict[str, Trigger] = {}
        self.response_urls: dict[str, ResponseUrl] = {}
        self.oauth_codes: dict[str, OAuthCode] = {}
        self.tokens: dict[str, Auth] = {}
        self.revoked_tokens: set[str] = set()
        self.rotation = TokenRotation()  # expiring access tokens and refresh tokens (localslack.token_rotation)
        # AI apps: split-view title, prompts, live status per "<channel>:<thread_ts>" (localslack.ai_apps)
        self.assistant_threads: dict[str, AssistantThread] = {}
        # set to Slack's error (e.g. "not_authorized": the app is not declared as an agent) to refuse agents.sessions.*
        self.agent_sessions_refusal: str | None = None
        # set to Slack's error (e.g. "invalid_arguments": an older workspace) to refuse task chunks in chat.*Stream
        self.stream_tasks_refusal: str | None = None
        for team in self.teams.values():
            self._register_bot_token(team)
        self.version = 0
        self._changed = asyncio.Event()
        self.on_change: list[Callable[[], None]] = []

    # ---- change notification -------------------------------------------------------------------------

    def touch(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()
        for hook in self.on_change:
            hook()

    async def wait_changed(self, since_version: int, max_wait_s: float) -> int:
        """Wait until ``version`` moves past ``since_version`` (or the timeout); return the version."""
        if self.version != since_version:
            return self.version
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), max_wait_s)
        except TimeoutError:
            pass
        return self.version

    # ---- teams, users, tokens ------------------------------------------------------------------------

    def _register_bot_token(self, team: Team, scopes: list[str] | None = None) -> None:
        if not (team.bot_token and team.bot_user_id) or team.bot_token in self.revoked_tokens:
            return
        org = self.enterprises.get(team.enterprise_id or "")
        granted = scopes if scopes is not None else self._scopes_of(team.bot_token)
        if org is not None and org.org_install and team.bot_token == org.bot_token:
            self.tokens[team.bot_token] = Auth(
                team.bot_token,
                org.id,
                team.bot_user_id,
                team.bot_id,
                scopes=granted,
                enterprise_id=org.id,
                is_enterprise_install=True,
                teams=[t.id for t in self.teams.values() if t.enterprise_id == org.id and t.installed],
            )
            return
        self.tokens[team.bot_token] = Auth(
            team.bot_token,
            team.id,
            team.bot_user_id,
            team.bot_id,
            scopes=granted,
            enterprise_id=team.enterprise_id,
        )

    def _scopes_of(self, token: str) -> list[str] | None:
        known = self.tokens.get(token)
        return known.scopes if known is not None else self.app_scopes

    def install(
        self,
        team_id: str,
        name: str | None = None,
        bot_token: str | None = None,
        scopes: list[str] | None = None,
    ) -> Team:
        """Install the app in ``team_id`` (creating the team if new): a bot user and a bot token with
        ``scopes`` (default: the manifest's). Reinstalling after an uninstall issues a new token."""
        team = self.teams.get(team_id)
        if team is None:
            team = Team(
                id=team_id, name=name or team_id, domain=re.sub(r"[^a-z0-9]+", "-", (name or team_id).lower())
            )
            self.teams[team_id] = team
        if not team.installed:
            suffix = team_id[1:]
            team.bot_user_id = team.bot_user_id or f"U{suffix}BOT"
            team.bot_id = team.bot_id or f"B{suffix}BOT"
            token = bot_token or f"xoxb-local-{team_id}"
            if token in self.revoked_tokens:
                token = f"xoxb-local-{team_id}-{secrets.token_hex(4)}"
            team.bot_token = token
            bot = agent_user(team.bot_user_id, team_id, team.bot_id)
            existing = self.users.setdefault(bot.id, bot)
            existing.deleted = False
        self._register_bot_token(team, scopes if scopes is not None else self.app_scopes)
        self.touch()
        return team

    def install_org(self, enterprise_id: str, scopes: list[str] | None = None) -> Enterprise:
        """Install the app org-wide in ``enterprise_id``: one bot and token for all of its workspaces."""
        org = self.enterprise(enterprise_id)
        if not org.org_install or not org.bot_token or org.bot_token in self.revoked_tokens:
            suffix = org.id[1:]
            org.org_install = True
            org.bot_user_id = org.bot_user_id or f"W{suffix}BOT"
            org.bot_id = org.bot_id or f"B{suffix}BOT"
            token = f"xoxb-local-{org.id}"
            org.bot_token = token if token not in self.revoked_tokens else f"{token}-{secrets.token_hex(4)}"
            home = next((t.id for t in self.teams.values() if t.enterprise_id == org.id), org.id)
            bot = agent_user(org.bot_user_id, home, org.bot_id, enterprise_id=org.id, enterprise_name=org.name)
            self.users.setdefault(bot.id, bot).deleted = False
        for team in self.teams.values():
            if team.enterprise_id == org.id:
                team.bot_user_id, team.bot_id, team.bot_token = org.bot_user_id, org.bot_id, org.bot_token
        for team in self.teams.values():
            if team.enterprise_id == org.id:
                self._register_bot_token(team, scopes if scopes is not None else self.app_scopes)
        self.touch()
        return org

    def enterprise(self, enterprise_id: str | None) -> Enterprise:
        org = self.enterprises.get(enterprise_id or "")
        if org is None:
            raise ApiError("team_not_found")
        return org

    def enterprise_of(self, team_id: str | None) -> Enterprise | None:
        team = self.teams.get(team_id or "")
        return self.enterprises.get(team.enterprise_id or "") if team is not None else None

    def uninstall(self, team_or_enterprise_id: str) -> list[str]:
        """Remove the app from a workspace (or, for an ``E…`` id, from the whole org): its bot token is
        revoked (``token_revoked`` from then on) and its bot leaves every channel. Returns the bot user ids
        whose tokens were revoked (what ``tokens_revoked`` reports)."""
        if team_or_enterprise_id in self.enterprises:
            org = self.enterprises[team_or_enterprise_id]
            targets = [t for t in self.teams.values() if t.enterprise_id == org.id]
            org.org_install = False
        else:
            targets = [self.team(team_or_enterprise_id)]
        revoked: list[str] = []
        for team in targets:
            earlier = [t for t, a in self.tokens.items() if team.bot_id and a.bot_id == team.bot_id]
            for token in earlier:  # a rotating install's access tokens not yet expired
                self.revoke_token(token, touch=False)
            if team.bot_token:
                self.revoke_token(team.bot_token, touch=False)
                if team.bot_user_id and team.bot_user_id not in revoked:
                    revoked.append(team.bot_user_id)
            for channel in self.channels.values():
                if channel.team_id == team.id and team.bot_user_id in channel.members:
                    channel.members = [m for m in channel.members if m != team.bot_user_id]
            team.bot_token = None
        self.touch()
        return revoked

    def revoke_token(self, token: str, *, touch: bool = True) -> None:
        """The token answers ``token_revoked`` from now on (an uninstall, or ``auth.revoke``)."""
        self.revoked_tokens.add(token)
        self.tokens.pop(token, None)
        if touch:
            self.touch()

    def deactivate_user(self, user_id: str) -> User:
        """A deactivated account: ``deleted: true`` in users.info, and its tokens answer
        ``account_inactive`` (for the bot user: the bot token)."""
        user = self.user(user_id)
        user.deleted = True
        self.touch()
        return user

    def archive_channel(self, channel_id: str, archived: bool = True) -> Channel:
        channel = self.channel(channel_id)
        channel.is_archived = archived
        self.touch()
        return channel

    def add_user(self, user: User) -> User:
        self.users[user.id] = user
        self.touch()
        return user

    def add_channel(self, channel: Channel) -> Channel:
        self.channels[channel.id] = channel
        self.history.setdefault(channel.id, [])
        self.touch()
        return channel

    def issue_user_token(self, user_id: str) -> str:
        user = self.user(user_id)
        token = f"xoxp-local-{user.id}-{secrets.token_hex(4)}"
        self.tokens[token] = Auth(token, user.team_id, user.id, None, enterprise_id=user.enterprise_id)
        return token

    def auth_for(self, token: str | None) -> Auth:
        """Slack's authentication answers: ``not_authed`` (no token), ``invalid_auth`` (unknown),
        ``token_revoked`` (uninstalled / revoked), ``account_inactive`` (its user or bot user was
        deactivated)."""
        if not token:
            raise ApiError("not_authed")
        if token in self.revoked_tokens:
            raise ApiError("token_revoked")
        auth = self.tokens.get(token)
        if auth is None:
            raise ApiError("invalid_auth")
        if auth.expires_at is not None and self.rotation.now() >= auth.expires_at:
            raise ApiError("token_expired")
        owner = self.users.get(auth.user_id)
        if owner is not None and owner.deleted:
            raise ApiError("account_inactive")
        return auth

    def user(self, user_id: str | None) -> User:
        user = self.users.get(user_id or "")
        if user is None:
            raise ApiError("user_not_found")
        return user

    def team(self, team_id: str) -> Team:
        team = self.teams.get(team_id)
        if team is None:
            raise ApiError("team_not_found")
        return team

    def bot_profile(self, team_id: str) -> dict[str, Any]:
        team: Team | Enterprise = self.teams[team_id] if team_id in self.teams else self.enterprises[team_id]
        icon = f"{self.base_url}/ui/avatar/{team.bot_user_id}.svg"
        return {
            "id": team.bot_id,
            "app_id": APP_ID,
            "user_id": team.bot_user_id,
            "name": "agent",
            "icons": {"image_36": icon, "image_48": icon, "image_72": icon},
            "deleted": False,
            "updated": 1767225600,
            "team_id": team_id,
        }

    # ---- channels ------------------------------------------------------------------------------------

    def channel(self, channel_id: str | None) -> Channel:
        channel = self.channels.get(channel_id or "")
        if channel is None:
            raise ApiError("channel_not_found")
        return channel

    def channel_for(self, auth: Auth, channel_id: str | None) -> Channel:
        """The channel as the token sees it: unknown or not shared with its team → channel_not_found."""
        channel = self.channel(channel_id)
        if not any(auth.reaches(t) for t in (channel.team_id, *channel.connected_team_ids)):
            raise ApiError("channel_not_found")
        if channel.is_im and auth.user_id not in channel.members:
            raise ApiError("channel_not_found")
        return channel

    def installation_for(self, channel: Channel) -> Team | None:
        """The installed team whose bot sees this channel (its own team first, then connected ones)."""
        for team_id in (channel.team_id, *channel.connected_team_ids):
            team = self.teams.get(team_id)
            if team and team.installed and team.bot_user_id in channel.members:
                return team
        return None

    def dm_channel(self, user_id: str, team_id: str | None = None) -> Channel:
        """The DM between ``user_id`` and the bot of ``team_id`` (default: the user's team), created on demand."""
        user = self.user(user_id)
        team = self.team(team_id or user.team_id)
        if not team.installed:
            raise ApiError("app_not_installed")
        for channel in self.channels.values():
            if channel.is_im and channel.im_user == user.id and channel.team_id == team.id:
                return channel
        channel_id = f"D{user.id[1:]}" if team.bot_user_id == "U0BOT" else f"D{team.id[1:]}{user.id[1:]}"
        while channel_id in self.channels:
            channel_id = random_id("D", 9)
        channel = Channel(
            id=channel_id,
            team_id=team.id,
            is_im=True,
            im_user=user.id,
            members=[team.bot_user_id or "", user.id],
            created=int(time.time()),
        )
        return self.add_channel(channel)

    def channels_of(self, user_id: str) -> list[Channel]:
        return [c for c in self.channels.values() if user_id in c.members]

    # ---- messages ------------------------------------------------------------------------------------

    def find_message(self, channel_id: str, ts: str | None) -> Message | None:
        for message in self.history.get(channel_id, []):
            if message.ts == ts:
                return message
        return None

    def add_message(self, message: Message) -> Message:
        """Append to history; a reply updates its parent's thread fields like Slack does."""
        if message.thread_ts:
            parent = self.find_message(message.channel, message.thread_ts)
            if parent is not None and parent.is_reply:  # a reply's ts: Slack threads under its parent
                parent = self.find_message(message.channel, parent.thread_ts)
            if parent is None:
                message.thread_ts = None
            else:
                message.thread_ts = parent.ts
                message.parent_user_id = parent.user
                parent.thread_ts = parent.ts
                parent.reply_count += 1
                if message.user not in parent.reply_users:
                    parent.reply_users = [*parent.reply_users, message.user][-5:]
                parent.latest_reply = message.ts
        self.history.setdefault(message.channel, []).append(message)
        thread = self.assistant_threads.get(f"{message.channel}:{message.thread_ts}")
        if thread is not None and message.bot_id:  # the app's reply replaces its status, as in Slack
            thread.status, thread.loading_messages = "", []
        self.touch()
        return message

    def delete_message(self, message: Message) -> None:
        channel_history = self.history[message.channel]
        if message.reply_count and not message.is_reply:
            # A thread root with replies stays as a tombstone so the thread remains readable.
            message.subtype = "tombstone"
            message.text = "This message was deleted."
            message.blocks = None
            message.attachments = None
            message.bot_id = None
            message.user = "USLACKBOT"
        else:
            channel_history.remove(message)
            if message.is_reply:
                parent = self.find_message(message.channel, message.thread_ts)
                if parent is not None:
                    parent.reply_count = max(0, parent.reply_count - 1)
                    replies = [m for m in channel_history if m.is_reply and m.thread_ts == parent.ts]
                    parent.latest_reply = replies[-1].ts if replies else None
                    parent.reply_users = list(dict.fromkeys(m.user for m in replies))[-5:]
                    if parent.reply_count == 0 and parent.subtype == "tombstone":
                        channel_history.remove(parent)
        self.touch()

    def top_level(self, channel_id: str) -> list[Message]:
        return [
            m for m in self.history.get(channel_id, []) if not m.is_reply or m.subtype == "thread_broadcast"
        ]

    def thread(self, channel_id: str, thread_ts: str) -> list[Message]:
        """The thread root followed by its replies, oldest first (conversations.replies order)."""
        return [m for m in self.history.get(channel_id, []) if m.ts == thread_ts or m.thread_ts == thread_ts]

    def add_reaction(self, message: Message, name: str, user_id: str) -> None:
        reaction = next((r for r in message.reactions if r.name == name), None)
        if reaction is None:
            reaction = Reaction(name=name)
            message.reactions.append(reaction)
        if user_id in reaction.users:
            raise ApiError("already_reacted")
        reaction.users.append(user_id)
        self.touch()

    def remove_reaction(self, message: Message, name: str, user_id: str) -> None:
        reaction = next((r for r in message.reactions if r.name == name), None)
        if reaction is None or user_id not in reaction.users:
            raise ApiError("no_reaction")
        reaction.users.remove(user_id)
        if not reaction.users:
            message.reactions.remove(reaction)
        self.touch()

    # ---- ephemerals ----------------------------------------------------------------------------------

    def add_ephemeral(self, ephemeral: Ephemeral) -> Ephemeral:
        self.ephemerals.append(ephemeral)
        self.touch()
        return ephemeral

    def find_ephemeral(self, user_id: str, channel_id: str, ts: str | None) -> Ephemeral | None:
        for ephemeral in self.ephemerals:
            if ephemeral.user == user_id and ephemeral.channel == channel_id and ephemeral.ts == ts:
                return ephemeral
        return None

    def ephemerals_for(self, user_id: str) -> list[Ephemeral]:
        return [e for e in self.ephemerals if e.user == user_id]

    def remove_ephemeral(self, ephemeral: Ephemeral) -> None:
        self.ephemerals.remove(ephemeral)
        self.touch()

    # ---- triggers, response urls, oauth codes --------------------------------------------------------

    def issue_trigger(self, user_id: str, team_id: str) -> str:
        now = time.time()
        trigger_id = f"{int(now)}.{secrets.randbelow(10**12):012d}.{secrets.token_hex(16)}"
        self.triggers[trigger_id] = Trigger(user_id, team_id, time.monotonic() + self.trigger_ttl_s)
        return trigger_id

    def use_trigger(self, trigger_id: str | None) -> Trigger:
        if not trigger_id:
            raise ApiError("invalid_arguments", extra=error_messages("missing required field: trigger_id"))
        trigger = self.triggers.get(trigger_id)
        if trigger is None:
            raise ApiError("invalid_trigger_id")
        if trigger.used:
            raise ApiError("exchanged_trigger_id")
        if time.monotonic() > trigger.expires_at:
            raise ApiError("expired_trigger_id")
        trigger.used = True
        return trigger

    def issue_response_url(self, context: ResponseUrl) -> str:
        hook_id = secrets.token_urlsafe(16)
        self.response_urls[hook_id] = context
        return f"{self.base_url}/response_url/{hook_id}"

    def issue_oauth_code(
        self, team_id: str, user_id: str | None, scopes: list[str], redirect_uri: str | None = None
    ) -> str:
        code = f"{team_id}.{secrets.token_hex(12)}"
        self.oauth_codes[code] = OAuthCode(team_id, user_id, scopes, redirect_uri)
        return code

    # ---- views ---------------------------------------------------------------------------------------

    def new_view(self, view: dict[str, Any], *, user_id: str, team: Team, view_id: str | None = None) -> View:
        stored = View(
            id=view_id or random_id("V"),
            team_id=team.id,
            user_id=user_id,
            type=view["type"],
            hash=f"{time.time():.6f}.{secrets.token_hex(4)}",
            blocks=list(view.get("blocks") or []),
            title=view.get("title"),
            submit=view.get("submit"),
            close=view.get("close"),
            callback_id=view.get("callback_id") or "",
            private_metadata=view.get("private_metadata") or "",
            external_id=view.get("external_id") or "",
            clear_on_close=bool(view.get("clear_on_close")),
            notify_on_close=bool(view.get("notify_on_close")),
            bot_id=team.bot_id,
        )
        self.views[stored.id] = stored
        return stored

    def replace_view(self, current: View, view: dict[str, Any], team: Team) -> View:
        """views.update / response_action=update: same id, new content and hash, typed state kept by ids."""
        replacement = self.new_view(view, user_id=current.user_id, team=team, view_id=current.id)
        replacement.root_view_id = current.root_view_id
        replacement.previous_view_id = current.previous_view_id
        kept_ids = {
            (b.get("block_id"), e.get("action_id")) for b in replacement.blocks for e in block_elements(b)
        }
        replacement.state_values = {
            block_id: {a: v for a, v in actions.items() if (block_id, a) in kept_ids}
            for block_id, actions in current.state_values.items()
        }
        replacement.state_values = {k: v for k, v in replacement.state_values.items() if v}
        self.touch()
        return replacement

    def find_view(self, view_id: str | None = None, external_id: str | None = None) -> View | None:
        if view_id:
            return self.views.get(view_id)
        if external_id:
            return next((v for v in self.views.values() if v.external_id == external_id), None)
        return None

    def modal_stack(self, user_id: str) -> list[View]:
        return [self.views[v] for v in self.modal_stacks.get(user_id, []) if v in self.views]

    def open_modal(self, user_id: str, view: View) -> None:
        view.root_view_id = view.id
        self.modal_stacks[user_id] = [view.id]
        self.touch()

    def push_modal(self, user_id: str, view: View) -> None:
        stack = self.modal_stacks.setdefault(user_id, [])
        if len(stack) >= MODAL_STACK_MAX:
            raise ApiError("push_limit_reached")
        view.previous_view_id = stack[-1] if stack else None
        view.root_view_id = stack[0] if stack else view.id
        stack.append(view.id)
        self.touch()

    def pop_modal(self, user_id: str, view_id: str) -> None:
        stack = self.modal_stacks.get(user_id, [])
        if view_id in stack:
            del stack[stack.index(view_id) :]
        self.touch()

    def clear_modals(self, user_id: str) -> None:
        self.modal_stacks[user_id] = []
        self.touch()

    def is_open(self, view: View) -> bool:
        if view.type == "home":
            return self.home_views.get((view.team_id, view.user_id)) == view.id
        return view.id in self.modal_stacks.get(view.user_id, [])

    def home_view(self, user_id: str, team_id: str | None = None) -> View | None:
        team_id = team_id or self.user(user_id).team_id
        view_id = self.home_views.get((team_id, user_id))
        return self.views.get(view_id) if view_id else None

    def publish_home(self, user_id: str, team: Team, view: dict[str, Any]) -> View:
        current = self.home_view(user_id, team.id)
        stored = (
            self.replace_view(current, view, team)
            if current
            else self.new_view(view, user_id=user_id, team=team)
        )
        self.home_views[(team.id, user_id)] = stored.id
        self.touch()
        return stored


