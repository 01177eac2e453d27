"""The localslack browser UI driven in headless Chromium against a real Bolt app (skipped without Chromium)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Literal

import pytest
from aiohttp import web
from pydantic import BaseModel, Field
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from blocks.forms import form_blocks, parse_form_state
from localslack import ALICE, BOB, BOT_TOKEN, GENERAL, LocalSlack

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.async_api")

SECRET = "ui-test-secret"
CARD = [
    {
        "type": "section",
        "block_id": "what",
        "text": {"type": "mrkdwn", "text": "Run *refund_charge* for `ch_123`?"},
    },
    {
        "type": "actions",
        "block_id": "act",
        "elements": [
            {
                "type": "button",
                "action_id": "approve",
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": "r1",
                "confirm": {
                    "title": {"type": "plain_text", "text": "Refund $40?"},
                    "text": {"type": "mrkdwn", "text": "This moves money."},
                    "confirm": {"type": "plain_text", "text": "Refund"},
                    "deny": {"type": "plain_text", "text": "Back"},
                    "style": "danger",
                },
            }
        ],
    },
    {"type": "file", "external_id": "ext-1", "source": "remote"},
]
MODAL = {
    "type": "modal",
    "callback_id": "answer",
    "title": {"type": "plain_text", "text": "Your answer"},
    "submit": {"type": "plain_text", "text": "Send"},
    "blocks": [
        {
            "type": "input",
            "block_id": "answer",
            "label": {"type": "plain_text", "text": "Answer"},
            "element": {"type": "plain_text_input", "action_id": "text"},
        }
    ],
}


@pytest.fixture
async def browser_page() -> AsyncIterator[object]:
    async with playwright_api.async_playwright() as playwright:
        browser = None
        for options in (
            {},
            {"executable_path": shutil.which("chromium") or shutil.which("chromium-browser")},
        ):
            if options.get("executable_path", "") is None:
                continue
            try:
                browser = await playwright.chromium.launch(args=["--no-sandbox"], **options)
                break
            except Exception:  # no bundled browser; try the system one
                continue
        if browser is None:
            pytest.skip("no Chromium available for playwright")
        page = await browser.new_page(viewport={"width": 1300, "height": 800})
        yield page
        await browser.close()


async def test_a_person_approves_in_the_browser(browser_page) -> None:  # noqa: ANN001
    page = browser_page
    async with LocalSlack(bot_url=None, signing_secret=SECRET) as slack:
        app = AsyncApp(signing_secret=SECRET, client=AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN))
        submitted: list[str] = []

        @app.event("app_mention")
        async def mention(event: dict, say) -> None:  # noqa: ANN001
            await say(text="Approval needed", blocks=CARD, thread_ts=event["ts"])

        @app.event("message")
        async def message() -> None:
            pass

        @app.action("approve")
        async def approve(ack, body: dict, client: AsyncWebClient) -> None:  # noqa: ANN001
            await ack()
            await client.views_open(trigger_id=body["trigger_id"], view=MODAL)

        @app.view("answer")
        async def answer(ack, view: dict) -> None:  # noqa: ANN001
            submitted.append(view["state"]["values"]["answer"]["text"]["value"])
            await ack()

        runner = web.AppRunner(app.web_app(path="/slack/events"), shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        slack.set_bot_url(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/slack/events")  # type: ignore[union-attr]
        try:
            await page.goto(slack.ui_url)
            await page.wait_for_selector("#composer-input")
            await page.fill("#composer-input", "@agent refund ch_123")
            await page.keyboard.press("Escape")  # close the @-mention menu
            await page.press("#composer-input", "Enter")
            await page.wait_for_selector(".thread-summary")
            assert slack.messages(GENERAL)[0].text == "<@U0BOT> refund ch_123"

            await page.select_option("#user-switcher", BOB)
            await page.click(".thread-summary")
            await page.wait_for_selector("#thread .bk-unsupported")
            assert "[unsupported block: file]" in await page.text_content("#thread .bk-unsupported")
            await page.click("#thread .bk-button.primary")
            await page.wait_for_selector("#confirm-layer:not([hidden])")
            await page.click('#confirm-layer [data-answer="yes"]')
            await page.wait_for_selector("#modal-layer .modal")
            await page.click(
                '#modal-layer button[type="submit"]'
            )  # empty required field: blocked client-side
            await page.wait_for_selector(".bk-error.required")
            assert submitted == []
            await page.fill("#modal-layer input", "Tuesday")
            await page.click('#modal-layer button[type="submit"]')
            await page.wait_for_selector("#modal-layer", state="hidden")
            assert submitted == ["Tuesday"]
            assert slack.open_views(BOB) == [] and slack.open_views(ALICE) == []

            slack.set_bot_url("http://127.0.0.1:9/slack/events")
            await page.fill("#thread-input", "still there?")
            await page.press("#thread-input", "Enter")
            await page.wait_for_selector("#banner:not([hidden])")
            assert "is it running?" in await page.text_content("#banner-text")
        finally:
            await runner.cleanup()


# ---- the form generator's inputs in a modal (blocks.forms) ----------------------------------------


class Booking(BaseModel):
    guest: str = Field(min_length=2)
    note: str = Field(default="", max_length=500)  # > 150: a multiline input
    nights: int = Field(ge=1, le=30)
    price: Decimal
    breakfast: bool = False
    room: Literal["single", "double", "suite"]
    extras: list[Literal["parking", "late checkout", "pet"]] = []
    arrive: date
    pickup: datetime


@asynccontextmanager
async def serving(app: AsyncApp, slack: LocalSlack) -> AsyncIterator[None]:
    """``app`` answering the workspace's requests over HTTP for the duration."""
    runner = web.AppRunner(app.web_app(path="/slack/events"), shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    slack.set_bot_url(f"http://127.0.0.1:{port}/slack/events")
    try:
        yield
    finally:
        await runner.cleanup()


async def test_every_form_input_renders_and_submits_in_slacks_state_shapes(browser_page) -> None:  # noqa: ANN001
    """Each input the form generator makes, in a modal in the browser: untouched, the submission parses back
    to the proposal (seconds of a date and time included); changed, to what was typed and picked; the
    client refuses a too-short text itself, and the bot's inline errors show under their field."""
    page = browser_page
    proposed = Booking(guest="Ada", nights=2, price=Decimal("120.50"), breakfast=True, room="double",
                       extras=["pet"], arrive=date(2026, 12, 4), pickup=datetime(2026, 12, 4, 9, 30, 15, tzinfo=UTC))
    async with LocalSlack(bot_url=None, signing_secret=SECRET) as slack:
        client = AsyncWebClient(base_url=slack.api_url, token=BOT_TOKEN)
        app = AsyncApp(signing_secret=SECRET, client=client)
        states: list[dict] = []
        parsed: list[Booking] = []

        @app.view("booking")
        async def booking(ack, view: dict) -> None:  # noqa: ANN001
            states.append(view["state"]["values"])
            result, errors = parse_form_state(Booking, view["state"]["values"])
            if errors:
                await ack(response_action="errors", errors=errors)
                return
            parsed.append(result)
            await ack()

        async def open_form() -> None:
            view = {"type": "modal", "callback_id": "booking", "title": {"type": "plain_text", "text": "Booking"},
                    "submit": {"type": "plain_text", "text": "Book"},
                    "blocks": form_blocks(Booking, proposed.model_dump(mode="json"))}
            await client.views_open(trigger_id=slack.issue_trigger_id(ALICE), view=view)
            await page.wait_for_selector("#modal-layer .modal")

        def field(name: str, inner: str) -> object:
            return page.locator(f'#modal-layer .bk-input-block[data-block="form:{name}"] {inner}')

        async with serving(app, slack):
            await page.goto(slack.ui_url)
            await page.wait_for_selector("#composer-input")
            await page.select_option("#user-switcher", ALICE)

            await open_form()
            assert await field("note", "textarea").count() == 1
            await page.click('#modal-layer button[type="submit"]')
            await page.wait_for_selector("#modal-layer", state="hidden")
            assert parsed == [proposed]
            untouched = states[-1]
            assert untouched["form:nights"]["value"] == {"type": "number_input", "value": "2"}
            assert untouched["form:price"]["value"] == {"type": "number_input", "value": "120.50"}
            assert untouched["form:pickup"]["value"] == {"type": "datetimepicker", "selected_date_time": 1796376615}
            assert untouched["form:arrive"]["value"] == {"type": "datepicker", "selected_date": "2026-12-04"}
            assert [o["value"] for o in untouched["form:breakfast"]["value"]["selected_options"]] == ["true"]
            assert untouched["form:note"]["value"] == {"type": "plain_text_input", "value": None}

            await open_form()
            await field("guest", "input").fill("B")
            await page.click('#modal-layer button[type="submit"]')
            await page.wait_for_selector(".bk-error.required")
            assert "at least 2 characters" in await field("guest", ".bk-error").text_content()
            assert len(states) == 1  # Slack's client keeps a too-short text to itself

            await field("guest", "input").fill("Bob")
            await field("note", "textarea").fill("quiet room\nhigh floor")
            await field("nights", "input").fill("31")
            await field("price", "input").fill("99.90")
            await field("breakfast", "input[type=checkbox]").uncheck()
            await field("room", "select").select_option("suite")
            await field("extras", "select").select_option("parking")
            await field("extras", '.chip:has-text("pet") .chip-x').click()
            await field("arrive", "input").fill("2026-12-24")
            await field("pickup", "input").fill("2026-12-24T18:45")
            await page.click('#modal-layer button[type="submit"]')
            await field("nights", ".bk-error").wait_for()  # the bot's answer, under the field it is about
            assert "less than or equal to 30" in await field("nights", ".bk-error").text_content()
            assert len(parsed) == 1

            await field("nights", "input").fill("3")
            await page.click('#modal-layer button[type="submit"]')
            await page.wait_for_selector("#modal-layer", state="hidden")
            changed = states[-1]
            assert changed["form:nights"]["value"] == {"type": "number_input", "value": "3"}
            assert changed["form:breakfast"]["value"]["selected_options"] == []
            assert changed["form:pickup"]["value"]["selected_date_time"] == 1798137900
            assert parsed[-1] == Booking(
                guest="Bob", note="quiet room\nhigh floor", nights=3, price=Decimal("99.90"), breakfast=False,
                room="suite", extras=["parking"], arrive=date(2026, 12, 24),
                pickup=datetime(2026, 12, 24, 18, 45, tzinfo=UTC))
            assert slack.open_views(ALICE) == []


async def open_thread(page, slack: LocalSlack, root_text: str) -> None:  # noqa: ANN001
    await page.goto(f"{slack.ui_url}#{GENERAL}")
    await page.locator("#messages .msg", has_text=root_text).locator(".thread-summary").click()


async def test_a_message_on_screen_stays_put_while_others_arrive(browser_page) -> None:  # noqa: ANN001
    """The page draws a message again only when it changed: one on screen keeps its node while messages arrive
    elsewhere in the channel and in its thread, so an element held on it (Playwright's
    ``scroll_into_view_if_needed`` holds one while it waits for the element to be stable) stays attached."""
    page = browser_page
    async with LocalSlack(bot_url=None, signing_secret=SECRET) as slack:
        ts, _ = await slack.post_message(ALICE, GENERAL, "the thread's question")
        await slack.post_message(BOB, GENERAL, "the reply on screen", thread_ts=ts)
        await open_thread(page, slack, "the thread's question")
        reply = page.locator("#thread-messages .msg", has_text="the reply on screen")
        held = await reply.element_handle()
        await slack.post_message(BOB, GENERAL, "meanwhile, in the channel")
        await slack.post_message(ALICE, GENERAL, "a later reply", thread_ts=ts)
        await playwright_api.expect(page.locator("#thread-messages .msg", has_text="a later reply")).to_be_visible()
        await playwright_api.expect(page.locator("#messages .msg", has_text="meanwhile")).to_be_visible()
        assert await held.evaluate("node => node.isConnected"), "the reply was drawn again though it did not change"
        await reply.scroll_into_view_if_needed(timeout=5_000)


async def test_a_click_pressed_while_a_message_arrives_still_counts(browser_page) -> None:  # noqa: ANN001
    """A person presses on a reaction as another message arrives and releases after it is drawn: the click
    counts (it was lost when the whole thread was drawn again under the pointer)."""
    page = browser_page
    async with LocalSlack(bot_url=None, signing_secret=SECRET) as slack:
        ts, _ = await slack.post_message(ALICE, GENERAL, "the thread's question")
        reply_ts, _ = await slack.post_message(BOB, GENERAL, "react to me", thread_ts=ts)
        reply = slack.message(GENERAL, reply_ts)
        slack.ws.add_reaction(reply, "eyes", BOB)
        await open_thread(page, slack, "the thread's question")
        pill = page.locator("#thread-messages .msg", has_text="react to me").locator(".reaction")
        box = await pill.bounding_box()
        assert box is not None
        await page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        await page.mouse.down()
        await slack.post_message(BOB, GENERAL, "meanwhile, in the channel")
        await playwright_api.expect(page.locator("#messages .msg", has_text="meanwhile")).to_be_visible()
        await page.mouse.up()
        await playwright_api.expect(pill).to_contain_text("2")
        assert sorted(next(r for r in reply.reactions if r.name == "eyes").users) == sorted([ALICE, BOB])
