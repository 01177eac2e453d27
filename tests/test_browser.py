"""The whole product in a browser: ``python -m bot run`` with no accounts, clicked through in headless Chromium.

Each test starts the product the way ``make run`` does (local Slack workspace + bot + offline demo model,
Redis from the ``redis_url`` fixture) and drives the local Slack page like a person: pick who you are in
the switcher, type in the composer, open the thread, click the card. On failure a screenshot, the page
HTML and the bot's log are saved under ``test-artifacts/`` and named in the assertion message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import expect

from localslack.seed import ALICE, BOB, CAROL, DAVE, ERIN
from tests.browser_helpers import (
    CHROMIUM,
    STEP_TIMEOUT_MS,
    RunningProduct,
    WorkspacePage,
    artifacts_on_failure,
    chromium_page,
    run_product,
)

pytestmark = [
    pytest.mark.browser,
    # checked before the product starts, so a machine without Chromium skips at once
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (.ci/run installs it with apt)"),
]


@pytest.fixture
async def product(redis, redis_url: str, tmp_path: Path) -> AsyncIterator[RunningProduct]:
    """The product on a flushed Redis database (the ``redis`` fixture flushes it before we start)."""
    async with run_product(redis_url, tmp_path / "run") as running:
        yield running


@pytest.fixture
async def workspace(product: RunningProduct, tmp_path: Path) -> AsyncIterator[WorkspacePage]:
    async with chromium_page(tmp_path / "chromium-profile") as page:
        ws = WorkspacePage(page)
        await ws.open(product.ui_url)
        yield ws


@pytest.fixture(autouse=True)
def _step_timeout() -> None:
    expect.set_options(timeout=STEP_TIMEOUT_MS)


async def request_refund(ws: WorkspacePage, charge: str, amount: str) -> None:
    """As alice in #general: mention the agent, wait for its approval card in the thread."""
    await ws.act_as(ALICE)
    await ws.open_channel("general")
    await ws.send(f"@agent refund {charge} ${amount}")
    thread = await ws.open_thread_of(f"refund {charge}")
    await expect(thread.get_by_role("button", name="Approve", exact=True)).to_be_visible()


async def approve_refund_as(ws: WorkspacePage, user_id: str, name: str, charge: str, amount: str) -> None:
    """Switch to ``user_id``, open the request's thread, click Approve: the refund's answer appears and
    the card says who approved it, with no buttons left."""
    await ws.act_as(user_id)
    await ws.open_channel("general")
    await ws.open_thread_of(f"refund {charge}")
    card = ws.thread_message("Requested by")  # the card (a task of the answer names the tool too)
    await card.get_by_role("button", name="Approve", exact=True).click()
    await expect(ws.thread_message(f"Refunded ${amount} on {charge}")).to_be_visible()
    await expect(card).to_contain_text(f"Approved by @{name}")
    await expect(card.locator(".mention", has_text=name)).to_be_visible()
    await expect(card.locator(".bk-button")).to_have_count(0)


async def test_a_refund_is_approved_by_the_finance_approver(
    workspace: WorkspacePage, product: RunningProduct
) -> None:
    ws = workspace
    async with artifacts_on_failure(ws.page, "browser-refund-approved-by-bob", product):
        await request_refund(ws, "ch_1001", "40")
        card = ws.thread_message("Requested by")  # the card (a task of the answer names the tool too)
        await expect(card).to_contain_text("ch_1001")

        await approve_refund_as(ws, BOB, "bob", "ch_1001", "40.00")
        answer = ws.thread_message("Refunded $40.00 on ch_1001")
        await expect(answer.locator("code", has_text="ch_1001")).to_be_visible()  # `ch_1001` rendered as code


async def test_the_finance_approver_edits_the_amount_before_approving(
    workspace: WorkspacePage, product: RunningProduct
) -> None:
    ws = workspace
    async with artifacts_on_failure(ws.page, "browser-edit-and-approve", product):
        await request_refund(ws, "ch_1002", "40")
        await ws.act_as(BOB)
        await ws.open_channel("general")
        await ws.open_thread_of("refund ch_1002")
        card = ws.thread_message("Requested by")  # the card (a task of the answer names the tool too)
        await expect(card).to_contain_text("Refund $40.00 on ch_1002")  # the tool's prompt= template
        await card.get_by_role("button", name="Edit & approve").click()

        modal = ws.page.get_by_role("dialog")
        amount = modal.locator('.bk-input-block[data-block="hitl_arg:amount"] input')
        await expect(amount).to_have_value("40")
        await amount.fill("0")
        await modal.get_by_role("button", name="Approve").click()
        await expect(modal).to_contain_text("greater than 0")  # pydantic's check, under the field
        await amount.fill("30")
        await modal.get_by_role("button", name="Approve").click()
        await expect(modal).to_have_count(0)

        await expect(ws.thread_message("Refunded $30.00 on ch_1002")).to_be_visible()
        await expect(card).to_contain_text("Approved by @bob")
        await expect(card).to_contain_text("Refund $30.00 on ch_1002")  # leads with what ran
        await expect(card).to_contain_text("edited from $40.00")
        await expect(card.locator(".bk-button")).to_have_count(0)


async def test_a_question_is_answered_from_its_choices(
    workspace: WorkspacePage, product: RunningProduct
) -> None:
    ws = workspace
    async with artifacts_on_failure(ws.page, "browser-question-answered", product):
        await ws.act_as(ALICE)
        await ws.open_channel("general")
        await ws.send("@agent ask me about lunch")
        await ws.open_thread_of("ask me about lunch")
        card = ws.thread_message("What should we do about lunch?")
        await expect(card).to_be_visible()

        radio = card.get_by_role("radio", name="Sushi")
        if await radio.count():
            await radio.click()
        else:  # more options than radio buttons hold: the card uses a select menu
            await card.locator("select.bk-select").select_option(label="Sushi")

        reply = ws.thread_message("Got it")
        await expect(reply).to_contain_text("Got it — Sushi.")  # the asterisks were rendered, not shown
        await expect(reply.locator(":is(b, i, strong, em)", has_text="Sushi")).to_be_visible()
        await expect(card.locator('input[type="radio"], select')).to_have_count(0)


async def test_an_admin_adds_an_approver_in_app_home_who_then_approves(
    workspace: WorkspacePage, product: RunningProduct
) -> None:
    ws = workspace
    editor = '[data-action="approvers:edit:refund_charge"]'
    async with artifacts_on_failure(ws.page, "browser-admin-edits-approvers", product):
        await ws.act_as(CAROL)
        home = await ws.open_home()
        refund_editor = home.locator(editor)
        await expect(refund_editor.locator(".chip", has_text="bob")).to_be_visible()  # seeded approver

        # The pick goes to the bot as block_actions; the bot saves before it acks, so the answer to the
        # page's /ui/select call means "saved" (and reloading before it could cancel the request).
        async with ws.page.expect_response("**/ui/select") as picked:
            await refund_editor.locator("select").select_option(DAVE)
        answer = await (await picked.value).json()
        assert answer["ok"] and not answer["problem"], answer
        await expect(refund_editor.locator(".chip", has_text="dave")).to_be_visible()

        # Saved, not just drawn: a fresh page load shows the list the bot published.
        await ws.page.reload()
        await ws.act_as(CAROL)
        home = await ws.open_home()
        refund_editor = home.locator(editor)
        await expect(refund_editor.locator(".chip", has_text="dave")).to_be_visible()
        await expect(refund_editor.locator(".chip", has_text="bob")).to_be_visible()
        await expect(ws.banner).to_be_hidden()

        await request_refund(ws, "ch_2002", "12")
        await approve_refund_as(ws, DAVE, "dave", "ch_2002", "12.00")


async def test_an_outsider_picked_as_approver_in_app_home_is_refused_and_not_left_on_screen(
    workspace: WorkspacePage, product: RunningProduct
) -> None:
    """Walked through in a browser: the bot refuses a Slack Connect user as an approver and republishes the
    stored list. Slack keeps what a person picked in an element while its block id stays the same, so the
    refused pick must not stay on screen looking saved."""
    ws = workspace
    editor = '[data-action="approvers:edit:refund_charge"]'
    async with artifacts_on_failure(ws.page, "browser-outsider-approver", product):
        await ws.act_as(CAROL)
        home = await ws.open_home()
        refund_editor = home.locator(editor)
        await expect(refund_editor.locator(".chip", has_text="bob")).to_be_visible()
        await refund_editor.locator("select").select_option(ERIN)
        await expect(home.locator(editor).locator(".chip", has_text="erin")).to_have_count(0)
        await expect(home.locator(editor).locator(".chip", has_text="bob")).to_be_visible()
        await ws.page.get_by_role("tab", name="Messages").or_(ws.page.get_by_text("Messages", exact=True)).first.click()
        await expect(ws.page.get_by_text("@erin is from another organisation")).to_be_visible()
