"""External execution as Slack drives it: the agent proposes, a person runs it
elsewhere and submits the result from the card, or a system posts it with a token only admitted
people get (HMAC, bound to the request and the person, expiring, single-use). Validated, audited,
resumed once."""

from __future__ import annotations

import json
import re

import aiohttp
from pydantic import BaseModel, Field, field_validator, model_validator

from bot.approval import Approval, allowed, always, rejected
from bot.models.scripted import ScriptedModel, call, say
from bot.tools import ToolContext, tool
from localslack.seed import ALICE, BOB, CAROL, GENERAL, TEAM_ID
from tests.audit_polling import audit_entries
from tests.e2e.test_approval_flow import button, mention_and_wait_for_card
from tests.e2e.test_decisions import inputs, result_reply


class Migration(BaseModel):
    database: str


class MigrationResult(BaseModel):
    rows_changed: int = Field(ge=0, title="Rows changed")
    log_url: str | None = Field(default=None, title="Log link")


def bob_runs_migrations(ctx) -> object:
    return allowed() if ctx.response.principal.slack_user_id == BOB else rejected("Only the DBA (bob) runs migrations.")


@tool(external=True, result=MigrationResult, approval=Approval(request=always(), response=bob_runs_migrations),
      prompt="Run the migration on {database}")
async def run_migration(args: Migration, ctx: ToolContext) -> dict:
    """Run a database migration (done by the DBA, by hand)."""
    raise AssertionError("an external tool's function never runs")


def script() -> ScriptedModel:
    return ScriptedModel([call("run_migration", database="orders"),
                          lambda messages, tools: say("Result: " + messages[-1]["content"])])


async def test_the_dba_submits_the_result_from_the_card_and_the_turn_resumes_with_it(local_slack, start_app):
    bot = await start_app(script(), [run_migration])
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    text = json.dumps(card.blocks)
    assert "Run elsewhere" in text and "Run the migration on orders" in text
    labels = [e["text"]["text"] for b in card.blocks if b["type"] == "actions" for e in b["elements"]]
    assert labels == ["Submit result", "Get a result token", "Cancel", "Cancel with reason"]

    await local_slack.click(CAROL, GENERAL, card.ts, button(card, "Submit result"))  # not admitted
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(CAROL))
    assert "Only the DBA (bob)" in note[-1].text and local_slack.open_views(CAROL) == []

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Submit result"))
    [modal] = await local_slack.wait_for(lambda: local_slack.open_views(BOB))
    assert set(inputs(modal)) == {"hitl_field:rows_changed", "hitl_field:log_url"}
    bad = await local_slack.submit_view(BOB, modal.id, {"hitl_field:rows_changed": {"value": "-3"}})
    assert "hitl_field:rows_changed" in json.loads(bad.body)["errors"]
    await local_slack.submit_view(BOB, modal.id, {"hitl_field:rows_changed": {"value": "1200"}})
    told = await result_reply(local_slack, ts)
    assert told == {"rows_changed": 1200, "log_url": None}
    settled = json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert "Result submitted" in settled and f"<@{BOB}>" in settled and "1200" in settled
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution")
    assert resolution.actor.endswith(BOB) and resolution.data["values"]["rows_changed"] == 1200


def tampered(token: str) -> str:
    """``token`` with one character changed that counts (the one before the last: a base64 token's last may carry
    only padding bits; the old ``token[:-2] + "00"`` changed nothing when the token already ended so)."""
    return f"{token[:-2]}{'1' if token[-2] == '0' else '0'}{token[-1]}"


def token_of(text: str) -> tuple[str, str]:
    url = re.search(r"curl -X POST (\S+)", text).group(1)
    token = re.search(r"Bearer ([A-Za-z0-9_\-.]+)", text).group(1)
    return url, token


async def test_a_system_posts_the_result_with_a_token_only_the_admitted_get(local_slack, start_app):
    bot = await start_app(script(), [run_migration])
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Get a result token"))
    refused = await local_slack.wait_for(lambda: local_slack.ephemerals(ALICE))
    assert "Bearer" not in refused[-1].text and "Only the DBA" in refused[-1].text

    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Get a result token"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    url, token = token_of(note[-1].text)
    assert url.startswith(bot.url) and "/hitl/requests/" in url

    async with aiohttp.ClientSession() as http:
        async def post(body, auth=f"Bearer {token}", to=url):
            async with http.post(to, data=json.dumps(body), headers={"Authorization": auth}) as r:
                return r.status, await r.json()

        assert (await post({"rows_changed": 5}, auth="Bearer " + tampered(token)))[0] == 401  # tampered
        assert (await post({"rows_changed": 5}, auth=""))[0] == 401
        other = url.replace("/hitl/requests/", "/hitl/requests/x")
        assert (await post({"rows_changed": 5}, to=other))[0] == 401  # bound to its request
        status, answer = await post({"rows_changed": "lots"})
        assert status == 422 and "rows_changed" in answer["error"]
        assert (await post(["not", "an", "object"]))[0] == 400
        status, answer = await post({"rows_changed": 7, "log_url": "https://ci.example.com/run/9"})
        assert status == 200 and answer["ok"] is True
        status, answer = await post({"rows_changed": 8})  # single use: the request is settled
        assert status == 409

    told = await result_reply(local_slack, ts)
    assert told == {"rows_changed": 7, "log_url": "https://ci.example.com/run/9"}
    settled = json.dumps(local_slack.message(GENERAL, card.ts).blocks)
    assert "Sent from another system" in settled and f"<@{BOB}>" in settled
    [resolution] = await audit_entries(bot.redis.client, TEAM_ID, kind="resolution")
    assert resolution.actor.endswith(BOB) and resolution.data["via"] == "api"


async def test_an_expired_token_is_refused(local_slack, start_app):
    now = [1_900_000_000.0]
    bot = await start_app(script(), [run_migration])
    bot.runtime.settings.clock = lambda: now[0]
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Get a result token"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    url, token = token_of(note[-1].text)
    now[0] += 24 * 3600 + 1
    async with aiohttp.ClientSession() as http, http.post(
            url, json={"rows_changed": 1}, headers={"Authorization": f"Bearer {token}"}) as r:
        assert r.status == 401
    assert any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)


async def test_cancelling_an_external_call_tells_the_model_it_did_not_run(local_slack, start_app):
    await start_app(script(), [run_migration])
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Cancel"))
    told = await result_reply(local_slack, ts)
    assert told["code"] == "TOOL_EXECUTION_DENIED"


class TicketedResult(BaseModel):
    rows_changed: int
    ticket: str

    @field_validator("ticket")
    @classmethod
    def _a_ticket(cls, value: str) -> str:  # a rule the JSON schema cannot say
        if not re.fullmatch(r"OPS-\d+", value):
            raise ValueError("a ticket looks like OPS-123")
        return value

    @model_validator(mode="after")
    def _changes_are_explained(self) -> TicketedResult:
        if self.rows_changed > 1000 and self.ticket == "OPS-0":
            raise ValueError("a large change needs a real ticket")
        return self


@tool(external=True, result=TicketedResult, approval=Approval(request=always(), response=bob_runs_migrations))
async def run_ticketed_migration(args: Migration, ctx: ToolContext) -> dict:
    """Run a database migration under a ticket (done by the DBA, by hand)."""
    raise AssertionError("an external tool's function never runs")


async def test_a_posted_result_the_result_model_refuses_is_not_settled(local_slack, start_app):
    """The result model's own validators run before a result settles: the JSON
    schema alone would take both refused bodies below."""
    await start_app(ScriptedModel([call("run_ticketed_migration", database="orders"),
                                   lambda messages, tools: say("Result: " + messages[-1]["content"])]),
                    [run_ticketed_migration])
    ts, card = await mention_and_wait_for_card(local_slack, "migrate orders")
    await local_slack.click(BOB, GENERAL, card.ts, button(card, "Get a result token"))
    note = await local_slack.wait_for(lambda: local_slack.ephemerals(BOB))
    url, token = token_of(note[-1].text)
    async with aiohttp.ClientSession() as http:
        async def post(body):
            async with http.post(url, json=body, headers={"Authorization": f"Bearer {token}"}) as r:
                return r.status, await r.json()

        status, answer = await post({"rows_changed": 3, "ticket": "none"})
        assert status == 422 and "ticket" in answer["error"] and "OPS-123" in answer["error"]
        status, answer = await post({"rows_changed": 5000, "ticket": "OPS-0"})
        assert status == 422 and "a large change needs a real ticket" in answer["error"]
        assert any(b["type"] == "actions" for b in local_slack.message(GENERAL, card.ts).blocks)  # still open
        status, answer = await post({"rows_changed": 3, "ticket": "OPS-42"})
        assert status == 200 and answer["ok"] is True
    told = await result_reply(local_slack, ts)
    assert told == {"rows_changed": 3, "ticket": "OPS-42"}
