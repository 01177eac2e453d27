"""The AI split view in a browser: headless Chromium on the local workspace, the real bot over
signed HTTP, a local OpenAI-wire model that writes slowly. A person opens the agent beside #general, sees
the suggested prompts, clicks one, and watches the answer appear in more than one step."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from playwright.async_api import expect

from bot.models.openai import OpenAIChatModel
from localslack.seed import GENERAL
from tests.browser_helpers import CHROMIUM, STEP_TIMEOUT_MS, chromium_page
from tests.e2e.conftest import app_starter
from tests.e2e.conftest import local_slack as local_slack  # noqa: F401 - the e2e fixture
from tests.e2e.test_approval_flow import refund_charge
from tests.fakes.openai_server import FakeOpenAI

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (.ci/run installs it with apt)"),
]

ANSWER = (
    "I can refund that charge once finance approves it. Tell me the charge id and the amount, and I will "
    "ask the finance approvers in this thread before anything happens."
)


async def test_the_split_view_shows_prompts_and_text_appearing_as_it_streams(
    local_slack,
    redis,
    redis_url,
    tmp_path: Path,
):
    async with FakeOpenAI(api_key="sk-test") as fake, app_starter(local_slack, redis_url, tmp_path) as start:
        fake.reply_text(ANSWER, chunk_delay_s=0.1)
        model = OpenAIChatModel("gpt-4o-mini", base_url=fake.base_url, api_key="sk-test", max_retries=0)
        await start(model, [refund_charge])
        async with chromium_page(tmp_path / "chromium-profile") as page:
            expect.set_options(timeout=STEP_TIMEOUT_MS)
            await page.goto(f"{local_slack.ui_url}#{GENERAL}")
            await page.locator("#open-assistant").click()
            prompt = page.locator(".assistant-prompt", has_text="Refund a charge")
            await expect(prompt).to_be_visible()
            await expect(page.locator("#thread-messages")).to_contain_text("Hi ")  # the greeting
            # the pane opened beside the channel, not instead of it
            await expect(page.locator("#conv-name")).to_have_text("# general")
            await expect(page.locator("#messages")).to_be_visible()
            # the chat lives in the agent's pane, not piled into the DM's Messages tab; the pane stays open
            await page.locator("#nav-dms .nav-item", has_text="agent").click()
            await expect(page.locator("#conv-name")).to_contain_text("agent")
            await expect(page.locator("#messages .msg")).to_have_count(0)
            await expect(page.locator("#messages")).not_to_contain_text("New chat")
            # looking at another channel with the pane open tells the app (assistant_thread_context_changed)
            await page.locator("#nav-channels .nav-item", has_text="finance").click()
            await expect(page.locator("#thread")).to_be_visible()
            [chat] = local_slack.ws.assistant_threads.values()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and (chat.context or {}).get("channel_id") != "C0FINANCE":
                await local_slack.ws.wait_changed(local_slack.ws.version, 0.5)
            assert (chat.context or {}).get("channel_id") == "C0FINANCE"
            await page.locator("#nav-channels .nav-item", has_text="general").click()
            await expect(page.locator("#conv-name")).to_have_text("# general")
            await prompt.click()

            seen: list[str] = []  # the streaming message's text, each time it changed
            deadline = time.monotonic() + 15
            final = page.locator("#thread-messages .msg-body", has_text=ANSWER[-40:]).filter(
                has_not=page.locator(".streaming")
            )
            while time.monotonic() < deadline and not await final.count():
                texts = await page.locator("#thread-messages .streaming").all_inner_texts()
                if texts and (not seen or seen[-1] != texts[-1]):
                    seen.append(texts[-1])
                await asyncio.sleep(0.05)
            assert await final.count(), f"the answer never completed; saw {seen}"
            partial = [t for t in seen if t.strip() and len(t.strip()) < len(ANSWER)]
            assert len(partial) >= 2, f"the text should appear in more than one step, saw {seen}"
            assert all(ANSWER.startswith(t.strip().rstrip("▍").strip()[:20]) for t in partial)
            await expect(page.locator("#thread-title")).to_have_text("I'd like to refund a charge.")
            await expect(page.locator("#thread-messages .bk-feedback-button")).to_have_count(2)

            # closed, the chat is found again under the DM's History tab (not Messages), and reopens in the pane
            await page.locator("#thread-close").click()
            await expect(page.locator("#thread")).to_be_hidden()
            await page.locator("#nav-dms .nav-item", has_text="agent").click()
            await page.locator("#conv-tabs .tab", has_text="History").click()
            chats = page.locator("#messages .history-item")
            await expect(chats).to_have_count(1)
            await chats.first.click()
            await expect(page.locator("#thread-messages")).to_contain_text(ANSWER[-40:])
