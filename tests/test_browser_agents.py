"""Each framework's example agent in the browser, as README and AGENTS.md tell a newcomer to run it:
``BOT_AGENT=examples.<framework>_agent:slack_agent make run`` with no account and no model key (the offline demo
model answers the framework's own client). Asked for a refund, the agent's card waits for bob (the example's
approver list, seeded in the local workspace); bob approves and the agent answers in the thread."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from playwright.async_api import expect

from localslack.seed import ALICE, BOB
from tests.browser_helpers import CHROMIUM, WorkspacePage, artifacts_on_failure, chromium_page, run_product

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A port for the bot: with none set the framework's own client finds the demo model at the bot's port, and
    ``PORT=0`` (the OS's pick) would leave that address unknown when the client is made."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (.ci/run installs it with apt)"),
]


@pytest.mark.parametrize("example", ["pydantic_ai_agent", "openai_agents_agent", "langgraph_agent"])
async def test_the_example_agent_runs_offline_and_its_refund_waits_for_its_approver(
        redis, redis_url: str, tmp_path: Path, example: str) -> None:
    async with run_product(redis_url, tmp_path / "run", BOT_AGENT=f"examples.{example}:slack_agent",
                           PYTHONPATH=str(ROOT), PORT=str(free_port())) as product, \
            chromium_page(tmp_path / "chromium") as page:
        ws = WorkspacePage(page)
        await ws.open(product.ui_url)
        async with artifacts_on_failure(page, f"browser-example-{example}", product):
            await ws.act_as(ALICE)
            await ws.open_channel("general")
            await ws.send("@agent refund ch_1001 $40")
            await ws.open_thread_of("refund ch_1001")
            card = ws.thread_message("Requested by")  # the card (the task list names the tool too)
            await expect(card.get_by_role("button", name="Approve", exact=True)).to_be_visible()
            await expect(card).to_contain_text("ch_1001")

            await ws.act_as(BOB)
            await ws.open_channel("general")
            await ws.open_thread_of("refund ch_1001")
            await card.get_by_role("button", name="Approve", exact=True).click()
            await expect(card).to_contain_text("Approved by @bob")
            await expect(ws.thread_message("Refunded $40.00 on ch_1001")).to_be_visible()  # the agent, told the result
