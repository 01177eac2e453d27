"""Ack discipline of App Home and ``/approvers``: Slack gets its answer before the bot asks
Slack anything, so a slow Slack never turns a command or a click into "operation timed out".

Slack is made slow on purpose: the bot talks to LocalSlack's Web API through :class:`HeldSlack`, a
proxy that holds the methods a test names until the test lets them through. An answer that arrives
while every Web API call of the bot is held cannot have waited on one. (LocalSlack itself has no
latency knob; the bot's code is not touched.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from aiohttp import web

from bot.models.scripted import ScriptedModel
from handlers.commands import SUBMIT_ADMIN_CHECK_SECONDS
from localslack.seed import BOB, CAROL, DAVE, TEAM_ID
from tests.e2e.test_governance import ALL_TOOLS, audit_entries, find, governance, loaded_modal

FORM = "application/x-www-form-urlencoded"
PROMPT_S = 1.0  # an answer that waited on a held call would take as long as the test holds it: far longer
UNREACHABLE = "http://127.0.0.1:9/response_url/gone"  # the discard port: connection refused


class HeldSlack:
    """A proxy in front of LocalSlack's Web API that holds chosen methods ("*": all but Bolt's one-off
    ``auth.test``) until released, and records what it held and what it let through."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.held: set[str] = set()
        self.released: set[str] = set()
        self.waiting: list[str] = []  # calls held right now
        self.forwarded: list[str] = []  # calls that reached LocalSlack, in order
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.api_url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.api_url = f"http://127.0.0.1:{port}/api/"
        self._session = aiohttp.ClientSession()

    async def stop(self) -> None:
        await self.release("*")
        for _ in range(100):  # let released calls finish before their session closes
            if not self.waiting:
                break
            await asyncio.sleep(0.01)
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def hold(self, *methods: str) -> None:
        async with self._changed:
            self.held.update(methods)
            self.released.difference_update(methods)
            if "*" in methods:
                self.released.clear()

    async def release(self, *methods: str) -> None:
        async with self._changed:
            if "*" in methods:
                self.held.clear()
            self.held.difference_update(methods)
            self.released.update(methods)
            self._changed.notify_all()

    def _is_held(self, method: str) -> bool:
        if method in self.held:
            return True
        return "*" in self.held and method != "auth.test" and method not in self.released

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        body = await request.read()
        async with self._changed:
            self.waiting.append(method)
            self._changed.notify_all()
            await self._changed.wait_for(lambda: not self._is_held(method))
            self.waiting.remove(method)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization")}
        async with self._session.request(request.method, self.upstream + method, params=list(request.query.items()),
                                         data=body, headers=headers) as answer:
            payload = await answer.read()
            kept = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "retry-after")}
        self.forwarded.append(method)
        return web.Response(body=payload, status=answer.status, headers=kept)

    async def until_waiting(self, *methods: str, timeout_s: float = 5.0) -> None:
        """Wait until the bot has asked for each of ``methods`` (and is held there)."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: set(methods) <= set(self.waiting)), timeout_s)


@pytest.fixture
async def held_slack(local_slack) -> AsyncIterator[HeldSlack]:
    proxy = HeldSlack(local_slack.api_url)
    await proxy.start()
    yield proxy
    await proxy.stop()


async def start_behind(start_app: Callable[..., Any], proxy: HeldSlack, **extra: Any) -> Any:
    return await start_app(ScriptedModel([]), ALL_TOOLS, SLACK_API_URL=proxy.api_url, **extra)


def slack_calls(proxy: HeldSlack) -> list[str]:
    return [m for m in proxy.forwarded if m != "auth.test"]


# --- /approvers -----------------------------------------------------------------------------------


async def test_approvers_answers_before_asking_slack_then_loading_then_the_editor(local_slack, start_app, held_slack):
    bot = await start_behind(start_app, held_slack)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    await held_slack.hold("*")
    started = time.monotonic()
    result = await local_slack.slash_command(CAROL, "/approvers")
    answered_s = time.monotonic() - started
    assert result.ok and result.ack_json() is None
    assert answered_s < PROMPT_S, f"the answer took {answered_s:.2f}s"
    await held_slack.until_waiting("views.open", "users.info")  # asked for at once, after the answer
    assert slack_calls(held_slack) == [], "no Web API call went through before the answer"

    await held_slack.release("views.open")  # the modal opens; Slack has not said whether carol is an admin
    [loading] = await local_slack.wait_for(lambda: local_slack.open_views(CAROL))
    assert loading.blocks[0]["text"]["text"].endswith("Loading…") and loading.submit is None
    assert "users.info" in held_slack.waiting

    await held_slack.release("*")
    editor = await loaded_modal(local_slack, CAROL)
    assert editor.id == loading.id and editor.callback_id == "approvers_edit", "the same modal, updated"
    assert find(editor.blocks, "users") is not None and editor.submit["text"] == "Save"
    assert [c for c in slack_calls(held_slack) if c.startswith("views.")] == ["views.open", "views.update"]
    assert local_slack.ephemerals(CAROL) == []


async def test_approvers_list_answers_at_once_and_replies_privately(local_slack, start_app, held_slack):
    bot = await start_behind(start_app, held_slack)
    await governance(bot).policies.set_approvers(TEAM_ID, "tool:pay_vendor", [BOB], actor="test")
    await held_slack.hold("users.info")
    result = await local_slack.slash_command(DAVE, "/approvers", "list")
    assert result.ok and result.ack_json() is None and result.elapsed_s < PROMPT_S
    assert local_slack.ephemerals(DAVE) == []
    await held_slack.release("users.info")
    [listed] = await local_slack.wait_for(lambda: local_slack.ephemerals(DAVE))
    assert f"<@{BOB}>" in listed.text and "ask one of them" in listed.text
    assert local_slack.open_views(DAVE) == []


async def captured_command(local_slack, user: str, text: str) -> dict[str, str]:
    """The exact fields Slack would send for ``user`` running ``/approvers text`` (not delivered)."""
    previous = local_slack.bot_url
    local_slack.set_bot_url(None)
    try:
        result = await local_slack.slash_command(user, "/approvers", text)
    finally:
        local_slack.set_bot_url(previous)
    return dict(result.payload)


async def deliver(local_slack, fields: dict[str, str]):
    body = urlencode(fields).encode()
    return await local_slack.deliver_raw(body, {**local_slack.sign(body), "Content-Type": FORM})


async def test_an_unopenable_modal_falls_back_to_a_private_message(local_slack, start_app):
    await start_app(ScriptedModel([]), ALL_TOOLS)
    for user, text, expected in ((CAROL, "", "The editor couldn't be opened just now"),
                                 (DAVE, "", "ask one of them"),
                                 (DAVE, "edit", "Only workspace admins can change who approves")):
        fields = await captured_command(local_slack, user, text)
        result = await deliver(local_slack, {**fields, "trigger_id": "1.2.expired"})
        assert result.status == 200 and result.ack_json() is None
        note = await local_slack.wait_for(lambda u=user, e=expected: [m for m in local_slack.ephemerals(u) if e in m.text])
        assert "pay_vendor" in note[-1].text or "Nothing was changed" in note[-1].text
        assert local_slack.open_views(user) == []


async def test_bad_response_urls_and_triggers_never_answer_500(local_slack, start_app, caplog):
    bot = await start_app(ScriptedModel([]), ALL_TOOLS)
    caplog.set_level(logging.WARNING)
    gone = f"{local_slack.base_url}/response_url/no-such-hook"  # answers 404
    for user in (CAROL, DAVE):
        for text in ("", "list", "edit", "help", "LIST extra words"):
            fields = await captured_command(local_slack, user, text)
            for response_url in (UNREACHABLE, gone, ""):
                result = await deliver(local_slack, {**fields, "trigger_id": "1.2.expired",
                                                     "response_url": response_url})
                assert result.status == 200, (user, text, response_url, result.status, result.body)
                assert result.elapsed_s < PROMPT_S
    await asyncio.wait_for(bot.wait_idle(), 30)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [f"{r.name}: {r.getMessage()}" for r in errors]
    assert any("could not reply to /approvers" in r.getMessage() for r in caplog.records)
    assert any("response_url refused" in r.getMessage() for r in caplog.records)
    assert len(await audit_entries(bot, "policy.refused")) == 3, "dave's edits are still audited"


# --- saving the editor ----------------------------------------------------------------------------


async def test_save_refuses_with_a_reason_when_admin_rights_cannot_be_checked_in_time(
    local_slack, start_app, held_slack
):
    bot = await start_behind(start_app, held_slack)
    await local_slack.slash_command(CAROL, "/approvers")
    editor = await loaded_modal(local_slack, CAROL)
    governance(bot).admins.forget(TEAM_ID, CAROL)  # as if the modal had been open for minutes
    await held_slack.hold("users.info")

    result = await local_slack.submit_view(CAROL, editor.id, {"approvers:pay_vendor": {"users": [BOB]}})
    ack = result.ack_json()
    assert result.ok and SUBMIT_ADMIN_CHECK_SECONDS <= result.elapsed_s < SUBMIT_ADMIN_CHECK_SECONDS + 1.0
    assert ack["response_action"] == "errors"
    assert list(ack["errors"].values()) == ["Couldn't check your admin rights just now; try again."]
    assert await governance(bot).policies.approvers(TEAM_ID, "tool:pay_vendor") is None
    [refused] = await audit_entries(bot, "policy.refused")
    assert refused.data["reason"] == "admin check failed" and refused.data["tools"] == ["pay_vendor", "rotate_keys"]

    await held_slack.release("users.info")  # the lookup that was cut short finishes and is remembered
    await local_slack.wait_for(lambda: governance(bot).admins.cached_admin(TEAM_ID, CAROL))
    again = await local_slack.submit_view(CAROL, editor.id, {"approvers:pay_vendor": {"users": [BOB]}})
    assert again.ok and again.ack_json() is None and again.elapsed_s < PROMPT_S
    assert (await governance(bot).policies.approvers(TEAM_ID, "tool:pay_vendor")).approvers == [BOB]
    assert local_slack.open_views(CAROL) == []


# --- App Home -------------------------------------------------------------------------------------


async def test_app_home_answers_before_asking_slack(local_slack, start_app, held_slack):
    await start_behind(start_app, held_slack)
    await held_slack.hold("*")
    result = await local_slack.open_home(CAROL)
    assert result.ok and result.elapsed_s < PROMPT_S
    await held_slack.until_waiting("users.info")
    assert slack_calls(held_slack) == [] and local_slack.home_view(CAROL) is None
    await held_slack.release("*")
    home = await local_slack.wait_for(lambda: local_slack.home_view(CAROL))
    assert find(home.blocks, "approvers:edit:pay_vendor") is not None


async def test_app_home_edit_answers_at_once_whether_or_not_admin_rights_are_known(
    local_slack, start_app, held_slack
):
    bot = await start_behind(start_app, held_slack)
    store, admins = governance(bot).policies, governance(bot).admins
    await local_slack.open_home(CAROL)
    home = await local_slack.wait_for(lambda: local_slack.home_view(CAROL))

    # known (the home just asked Slack about carol; bob and dave were looked up before): saved before the
    # answer, while Slack is held
    await admins.users(TEAM_ID, [BOB, DAVE])
    await held_slack.hold("*")
    result = await local_slack.select_users(CAROL, home.id, "approvers:edit:pay_vendor", [BOB])
    assert result.ok and result.elapsed_s < PROMPT_S
    assert (await store.approvers(TEAM_ID, "tool:pay_vendor")).approvers == [BOB]
    await held_slack.release("*")
    await local_slack.wait_for(
        lambda: find(local_slack.home_view(CAROL).blocks, "approvers:edit:pay_vendor").get("initial_users") == [BOB])

    # unknown (the cached answer expired): answered at once, checked and saved after
    admins.forget(TEAM_ID, CAROL)
    await held_slack.hold("*")
    result = await local_slack.select_users(CAROL, home.id, "approvers:edit:pay_vendor", [BOB, DAVE])
    assert result.ok and result.elapsed_s < PROMPT_S
    await held_slack.until_waiting("users.info")
    assert (await store.approvers(TEAM_ID, "tool:pay_vendor")).approvers == [BOB], "not before Slack says"
    await held_slack.release("*")
    await local_slack.wait_for(
        lambda: find(local_slack.home_view(CAROL).blocks, "approvers:edit:pay_vendor").get("initial_users")
        == [BOB, DAVE])
    assert (await store.approvers(TEAM_ID, "tool:pay_vendor")).approvers == [BOB, DAVE]
    assert local_slack.messages(local_slack.dm_channel(CAROL)) == [], "nothing to tell an admin whose edit saved"


def _listener_work() -> list[asyncio.Task[Any]]:
    """The tasks still running code of handlers/ (a listener's work after its ack)."""
    return [t for t in asyncio.all_tasks() if not t.done()
            and "/handlers/" in getattr(getattr(t.get_coro(), "cr_code", None), "co_filename", "")]


async def test_a_listener_s_work_still_waiting_on_slack_never_outlives_shutdown(local_slack, start_app, held_slack):
    bot = await start_behind(start_app, held_slack)
    await held_slack.hold("*")  # Slack answers no Web API call until the test ends
    result = await local_slack.open_home(CAROL)
    assert result.ok and result.elapsed_s < PROMPT_S
    await held_slack.until_waiting("views.publish")
    assert _listener_work(), "App Home is published after the ack"
    started = time.monotonic()
    await bot.close()
    assert time.monotonic() - started < 10, "shutdown waits a bounded time"
    assert _listener_work() == [], "nothing of the listeners outlives the connections shutdown closed"
    assert local_slack.home_view(CAROL) is None
