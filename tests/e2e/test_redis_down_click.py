"""A click while Redis is down: answered in time, privately, and counted.

Slack does not retry interactivity requests and shows a bare failure on anything but a 2xx, so a click
that cannot be recorded is answered 200 within the 3 s ack and the clicker alone reads "I couldn't record
that — try again in a moment" (an ephemeral message where the card is). Each is counted in
``hitl_slack_store_unavailable_total``. Once Redis is back the same click works.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from blocks.actions import FREEFORM_ACTION_ID, FREEFORM_BLOCK_ID, FREEFORM_CALLBACK_ID, modal_metadata
from handlers.outage import TRY_AGAIN
from localslack.seed import ALICE, GENERAL
from localslack.server import LocalSlack
from store.embedded import EmbeddedValkey
from tests.e2e import slack_kinds
from tests.e2e.test_approval_flow import RUNS, button, mention_and_wait_for_card, refund_charge, refund_script
from tests.e2e.test_every_payload import post
from tests.e2e.test_redis_restart import start_on, valkey  # noqa: F401 (fixtures)

COULD_NOT_RECORD = "I couldn't record that — try again in a moment"
assert TRY_AGAIN.startswith(COULD_NOT_RECORD)


async def unavailable_count(url: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{url}/metrics")).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("hitl_slack_store_unavailable_total{"))


async def test_a_click_while_redis_is_down_is_answered_200_with_a_private_try_again(
    local_slack: LocalSlack, start_on: Callable[..., Any], valkey: EmbeddedValkey  # noqa: F811
) -> None:
    RUNS.clear()
    bot = await start_on(refund_script(), [refund_charge])
    ts, card = await mention_and_wait_for_card(local_slack)
    await bot.wait_idle()
    before = await unavailable_count(bot.url)

    await valkey.stop()
    started = time.monotonic()
    result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    assert result.status == 200, result  # not a 500: Slack would show a bare failure
    assert time.monotonic() - started < 3.0, "answered within Slack's 3 s"
    note = await local_slack.wait_for(
        lambda: next((e for e in local_slack.ephemerals(ALICE) if COULD_NOT_RECORD in e.text), None), timeout_s=5)
    assert note.channel == GENERAL
    assert await unavailable_count(bot.url) == before + 1
    assert RUNS == []

    await valkey.start()  # back: the same click goes through, once
    result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
    assert result.status == 200, result
    reply = await local_slack.wait_for_message(GENERAL, thread_ts=ts, predicate=lambda m: "Result:" in m.text)
    assert "refunded" in reply.text
    await bot.wait_idle()
    assert RUNS == [{"charge": "ch_1", "principal": "slack:T0LOCAL:U0ALICE"}]


def freeform_submission(kinds: dict[str, tuple[dict[str, Any], str]]) -> tuple[dict[str, Any], str]:
    """The "type your own answer" modal of a card, submitted (its listener reads the request first)."""
    payload, content_type = kinds["view_submission"]
    view = {**payload["view"], "callback_id": FREEFORM_CALLBACK_ID,
            "private_metadata": modal_metadata("0123456789abcdef.feedface", GENERAL, "1767225602.000600"),
            "blocks": [{"type": "input", "block_id": FREEFORM_BLOCK_ID, "label": {"type": "plain_text", "text": "Answer"},
                        "element": {"type": "plain_text_input", "action_id": FREEFORM_ACTION_ID}}],
            "state": {"values": {FREEFORM_BLOCK_ID: {FREEFORM_ACTION_ID: {"type": "plain_text_input", "value": "yes"}}}}}
    return {**payload, "view": view}, content_type


async def test_while_redis_is_down_a_modal_keeps_its_answer_with_a_note_and_an_event_is_left_to_slack_retries(
    local_slack: LocalSlack, start_on: Callable[..., Any], valkey: EmbeddedValkey  # noqa: F811
) -> None:
    bot = await start_on(refund_script(), [refund_charge])
    kinds = slack_kinds.kinds()
    await valkey.stop()
    async with httpx.AsyncClient(base_url=bot.url, timeout=10) as http:
        command = await post(http, *kinds["slash command /approvers"])
        assert command.status_code == 200, command.text  # acknowledged; its answer follows once it can
        # a click on App Home's buttons, with Redis down: 200, and the person is told by direct message
        # a typed answer submitted in its modal: the modal stays open with the note under the field
        before = await unavailable_count(bot.url)
        submitted = await post(http, *freeform_submission(kinds))
        assert submitted.status_code == 200, submitted.text
        assert submitted.json() == {"response_action": "errors", "errors": {FREEFORM_BLOCK_ID: TRY_AGAIN}}
        assert await unavailable_count(bot.url) == before + 1
        # an event is not a person waiting on a click: its 5xx makes Slack deliver it again later
        mention = await post(http, *kinds["event app_mention"])
        assert mention.status_code >= 500, mention.text


class HangingProxy:
    """A TCP front for the Valkey socket that can hang: while ``hung``, what clients send is swallowed and
    nothing comes back (a server stuck, or a network that drops packets), so every command waits."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.hung = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, upstream = await asyncio.open_unix_connection(self.socket_path)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                if not self.hung:
                    sink.write(data)
                    await sink.drain()

        tasks = [asyncio.create_task(pump(reader, upstream)), asyncio.create_task(pump(up_reader, writer))]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            upstream.close()
            writer.close()


async def test_a_click_while_redis_hangs_is_answered_within_slacks_3_s(
    local_slack: LocalSlack, start_on: Callable[..., Any], valkey: EmbeddedValkey  # noqa: F811
) -> None:
    RUNS.clear()
    proxy = HangingProxy(valkey.url.removeprefix("unix://"))
    await proxy.start()
    try:
        bot = await start_on(refund_script(), [refund_charge], redis_url=f"redis://127.0.0.1:{proxy.port}/0")
        ts, card = await mention_and_wait_for_card(local_slack)
        await bot.wait_idle()

        proxy.hung = True
        started = time.monotonic()
        result = await local_slack.click(ALICE, GENERAL, card.ts, button(card, "Approve"))
        assert result.status == 200, result
        assert time.monotonic() - started < 3.0, "answered within Slack's 3 s"
        await local_slack.wait_for(
            lambda: any(COULD_NOT_RECORD in e.text for e in local_slack.ephemerals(ALICE)), timeout_s=5)
        assert RUNS == []
    finally:
        proxy.hung = False
        await proxy.stop()
