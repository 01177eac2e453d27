"""The localslack browser UI driven in headless Chromium against a real Bolt app (skipped without Chromium)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

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
