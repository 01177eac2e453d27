"""Who is an admin (handlers/shared/admins.py): users.info flags, Grid, BOT_ADMINS, Slack Connect, failing closed,
and answers within a budget for listeners that must ack in time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from handlers.shared.admins import AdminCheck, parse_user
from localslack.seed import ALICE, BOT_TOKEN, CAROL, DAVE, TEAM_ID
from localslack.server import LocalSlack


@pytest.fixture
async def slack() -> AsyncIterator[LocalSlack]:
    async with LocalSlack(bot_url=None, signing_secret="s") as local:
        yield local


def check(slack: LocalSlack, **kw) -> AdminCheck:
    async def client_for(team: str | None) -> AsyncWebClient:
        return AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)

    return AdminCheck(client_for, **kw)


def test_flags_missing_flags_and_grid():
    assert parse_user("U1", {"team_id": "T1", "is_owner": True}, "T1").admin_of("T1")
    assert parse_user("U1", {"team_id": "T1", "is_primary_owner": True}, "T1").admin_of("T1")
    assert not parse_user("U1", {"team_id": "T1"}, "T1").admin_of("T1"), "a missing flag counts as false"
    assert not parse_user("U1", {"team_id": "T1", "is_admin": "yes"}, "T1").admin_of("T1")
    grid = parse_user("W1", {"team_id": "T9", "enterprise_user": {"is_admin": True, "teams": ["T1", "T2"]}})
    assert grid.admin_of("T1") and grid.belongs_to("T1") and not grid.belongs_to("T3")
    assert not grid.admin_of("T3"), "an org admin rules the workspaces they are in"


def test_workspace_flags_count_only_for_the_workspace_they_are_about():
    member_of_both = {"team_id": "T1", "is_admin": True, "enterprise_user": {"teams": ["T1", "T2"]}}
    asked_in_t1 = parse_user("W1", member_of_both, "T1")
    assert asked_in_t1.admin_of("T1") and not asked_in_t1.admin_of("T2")
    assert not parse_user("W1", member_of_both).admin_of("T1"), "an org-wide token's answer says no workspace"
    assert parse_user("U1", {"deleted": True}).state == "deleted"


async def test_workspace_admins_bot_admins_and_everyone_else(slack):
    admins = check(slack, bot_admins={DAVE})
    assert await admins.is_admin(TEAM_ID, CAROL)
    assert await admins.is_admin(TEAM_ID, DAVE)
    assert not await admins.is_admin(TEAM_ID, ALICE)
    assert not await admins.is_admin(TEAM_ID, "U0NOSUCH")
    assert not await admins.is_admin(None, CAROL)


async def test_admin_of_a_partner_workspace_is_no_admin_here(slack):
    slack.add_user("U0PARTNERADMIN", "pat", team_id="T0OTHER", is_admin=True)
    assert not await check(slack).is_admin(TEAM_ID, "U0PARTNERADMIN")


async def test_deactivated_admin_is_no_admin(slack):
    slack.add_user("U0OLDADMIN", "old", is_admin=True).deleted = True
    admins = check(slack)
    assert not await admins.is_admin(TEAM_ID, "U0OLDADMIN")
    assert (await admins.user(TEAM_ID, "U0OLDADMIN")).state == "deleted"
    assert (await admins.user(TEAM_ID, "U0NOSUCH")).state == "missing"


async def test_errors_fail_closed_and_are_not_cached(slack):
    admins = check(slack)
    slack.fail_next("users.info", error="internal_error")
    assert not await admins.is_admin(TEAM_ID, CAROL)
    assert await admins.is_admin(TEAM_ID, CAROL), "the next call asks Slack again"


async def test_answers_are_cached_briefly(slack):
    now = [0.0]
    admins = check(slack, ttl=60, clock=lambda: now[0])
    assert await admins.is_admin(TEAM_ID, CAROL)
    slack.ws.user(CAROL).is_admin = slack.ws.user(CAROL).is_owner = False  # demoted
    assert await admins.is_admin(TEAM_ID, CAROL)
    assert len(slack.calls_to("users.info")) == 1
    now[0] = 61
    assert not await admins.is_admin(TEAM_ID, CAROL)


class SlowUsersInfo:
    """A client whose users.info waits until the test lets it through (Slack being slow), then asks LocalSlack."""

    def __init__(self, slack: LocalSlack) -> None:
        self.client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        self.token = self.client.token
        self.gate = asyncio.Event()
        self.asked = 0

    async def client_for(self, team: str | None) -> SlowUsersInfo:
        return self

    async def users_info(self, **kwargs):
        self.asked += 1
        await self.gate.wait()
        return await self.client.users_info(**kwargs)

    async def auth_test(self, **kwargs):
        return await self.client.auth_test(**kwargs)


async def test_no_answer_in_time_is_no_verdict_and_the_lookup_carries_on(slack):
    slow = SlowUsersInfo(slack)
    admins = AdminCheck(slow.client_for)  # type: ignore[arg-type]
    assert await admins.admin_status(TEAM_ID, CAROL, within=0.05) is None
    assert await admins.admin_status(TEAM_ID, CAROL, within=0.05) is None
    assert slow.asked == 1, "callers share the lookup in flight"
    slow.gate.set()
    assert await admins.admin_status(TEAM_ID, CAROL, within=1.0) is True
    assert slow.asked == 1 and len(slack.calls_to("users.info")) == 1, "the first lookup answered, once"
    assert admins.cached_admin(TEAM_ID, CAROL) is True


async def test_cached_admin_never_asks_slack(slack):
    admins = check(slack, bot_admins={DAVE})
    assert admins.cached_admin(TEAM_ID, DAVE) is True, "BOT_ADMINS need no lookup"
    assert admins.cached_admin(TEAM_ID, CAROL) is None, "unknown until Slack is asked"
    assert admins.cached_admin(None, CAROL) is False
    assert slack.calls_to("users.info") == []
    assert not await admins.is_admin(TEAM_ID, ALICE)
    assert admins.cached_admin(TEAM_ID, ALICE) is False
    assert len(slack.calls_to("users.info")) == 1


async def test_a_slack_error_is_no_verdict_rather_than_no(slack):
    admins = check(slack)
    slack.fail_next("users.info", error="internal_error")
    assert await admins.admin_status(TEAM_ID, CAROL) is None
    assert await admins.admin_status(TEAM_ID, ALICE) is False
