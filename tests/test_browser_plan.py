"""A streamed answer's tasks in a browser: headless Chromium on the local workspace,
the real bot over signed HTTP. One turn asks for two refunds at once: the answer's plan shows both calls
waiting on alice, live; she approves one and cancels the other with a reason; the plan ends with one task
complete (approved by @alice, its result) and one in error (cancelled: the reason)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import expect

from bot.models.scripted import ScriptedModel, calls, say
from handlers.delivery.status import STATUS_DELAY_S
from localslack.seed import ALICE, BOT_USER_ID, GENERAL
from tests.browser_helpers import CHROMIUM, STEP_TIMEOUT_MS, chromium_page
from tests.e2e.conftest import app_starter
from tests.e2e.conftest import local_slack as local_slack  # noqa: F401 - the e2e fixture
from tests.e2e.test_approval_flow import button, refund_charge

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (.ci/run installs it with apt)"),
]


def cards(slack, ts: str) -> list:  # noqa: ANN001
    return [m for m in slack.messages(GENERAL, thread_ts=ts) if m.blocks and "Approve" in str(m.blocks)]


async def test_the_plan_shows_an_approved_and_a_cancelled_call_as_people_see_them(
    local_slack, redis, redis_url, tmp_path: Path,  # noqa: F811
):
    model = ScriptedModel([calls(("refund_charge", {"charge_id": "ch_1", "amount": 5.0}),
                                 ("refund_charge", {"charge_id": "ch_2", "amount": 40.0})),
                           say("Refunded ch_1; ch_2 was not approved.")])
    async with app_starter(local_slack, redis_url, tmp_path) as start:
        await start(model, [refund_charge])
        ts, _ = await local_slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> refund ch_1 and ch_2")
        first, second = await local_slack.wait_for(lambda: len(cards(local_slack, ts)) == 2 and cards(local_slack, ts))
        async with chromium_page(tmp_path / "chromium-profile") as page:
            expect.set_options(timeout=STEP_TIMEOUT_MS)
            await page.goto(f"{local_slack.ui_url}#{GENERAL}")
            await page.locator("#messages .msg", has_text="refund ch_1 and ch_2").locator(".thread-summary").click()
            plan = page.locator("#thread-messages .bk-plan")
            await expect(plan).to_be_visible(timeout=int((STATUS_DELAY_S + 5) * 1000))  # live, while it waits
            await expect(plan.locator(".bk-task[data-status=pending]")).to_have_count(2)
            await expect(plan.locator(".bk-task").first).to_contain_text("waiting for @alice")
            await page.screenshot(path="/tmp/plan-waiting.png", full_page=True)

            await local_slack.click(ALICE, GENERAL, first.ts, button(first, "Approve"))
            await local_slack.post_message(ALICE, GENERAL, "cancel: ch_2 is over the limit", thread_ts=ts)
            done = page.locator("#thread-messages .msg", has_text="Refunded ch_1; ch_2 was not approved.")
            await expect(done.locator(".bk-plan")).to_be_visible()
            approved, cancelled = done.locator(".bk-task").nth(0), done.locator(".bk-task").nth(1)
            await expect(approved).to_have_attribute("data-status", "complete")
            await expect(approved).to_contain_text("approved by @alice")
            await expect(approved.locator(".bk-task-output")).to_contain_text('"refunded": "ch_1"')
            await expect(approved.locator(".bk-task-icon")).to_have_text("✓")
            await expect(cancelled).to_have_attribute("data-status", "error")
            await expect(cancelled).to_contain_text("cancelled: ch_2 is over the limit")
            await expect(cancelled.locator(".bk-task-icon")).to_have_text("✕")
            await done.scroll_into_view_if_needed()
            await page.screenshot(path="/tmp/plan-done.png", full_page=True)
