"""Who is an admin (handlers/admins.py): users.info flags, Grid, BOT_ADMINS, Slack Connect, failing closed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from handlers.admins import AdminCheck, parse_user
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
    assert parse_user("U1", {"team_id": "T1", "is_owner": True}).is_admin
    assert parse_user("U1", {"team_id": "T1", "is_primary_owner": True}).is_admin
    assert not parse_user("U1", {"team_id": "T1"}).is_admin, "a missing flag counts as false"
    assert not parse_user("U1", {"team_id": "T1", "is_admin": "yes"}).is_admin
    grid = parse_user("W1", {"team_id": "T9", "enterprise_user": {"is_admin": True, "teams": ["T1", "T2"]}})
    assert grid.is_admin and grid.belongs_to("T1") and not grid.belongs_to("T3")
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
