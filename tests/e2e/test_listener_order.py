"""Which of the app's Bolt listeners takes a request does not depend on their order.

Bolt runs the first listener whose matchers all pass, in registration order, and tries every one before it
(each try builds Bolt's whole set of listener arguments). ``handlers.register`` puts the approve cycle's
listeners first; that is safe only if no request Slack sends is matched by two listeners before the
fallback. Shown here for every kind of request in the catalog (``tests/e2e/slack_kinds.py``), and for each
action and view id of ours: the app as registered, with Bolt's own matchers. And Bolt's assistant
middleware, asked only about requests its predicates name (``handlers.assistant.ThreadsAssistant``), would
have matched none of the others.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.payload_utils import (
    is_assistant_event,
    is_other_message_sub_event_in_assistant_thread,
)
from slack_bolt.response import BoltResponse

from blocks.actions import (
    APPROVERS_ACTION_PREFIX,
    APPROVERS_CALLBACK_ID,
    EDIT_CALLBACK_ID,
    FORM_CALLBACK_ID,
    FREEFORM_CALLBACK_ID,
    REASON_CALLBACK_ID,
    REMOVE_SCHEDULE_ACTION_ID,
    REVOKE_GRANT_ACTION_ID,
    button_action_id,
    select_action_id,
)
from blocks.answers import FEEDBACK_ACTION
from handlers.assistant import ThreadsAssistant
from tests.e2e.slack_kinds import JSON, TS, encode, event, kinds
from tests.e2e.test_approval_flow import refund_charge
from tests.e2e.test_fuzz import RoutingModel
from tests.e2e.test_malformed import signed

RID = "0123456789abcdef.0123456789ab"
ACTION_IDS = [button_action_id(RID, 0), select_action_id(RID), FEEDBACK_ACTION, f"{APPROVERS_ACTION_PREFIX}x",
              REVOKE_GRANT_ACTION_ID, REMOVE_SCHEDULE_ACTION_ID, "not.ours"]
CALLBACK_IDS = [FREEFORM_CALLBACK_ID, REASON_CALLBACK_ID, EDIT_CALLBACK_ID, FORM_CALLBACK_ID, APPROVERS_CALLBACK_ID,
                "not_ours"]


def _requests() -> dict[str, tuple[dict[str, Any], str]]:
    """The catalog, the events we listen to that it lacks, and each block action and view again with each of
    our ids."""
    found = kinds()
    for kind in ("agent_session_stopped", "app_uninstalled", "tokens_revoked"):
        found[f"event {kind}"] = (event({"type": kind, "event_ts": TS, "channel": "D0ALICEDM", "thread_ts": TS}), JSON)
    for name, (payload, content_type) in list(found.items()):
        if payload.get("type") == "block_actions":
            for action_id in ACTION_IDS:
                again = copy.deepcopy(payload)
                again["actions"][0]["action_id"] = action_id
                found[f"{name} {action_id}"] = (again, content_type)
        if payload.get("type") in ("view_submission", "view_closed"):
            for callback_id in CALLBACK_IDS:
                again = copy.deepcopy(payload)
                again["view"]["callback_id"] = callback_id
                found[f"{name} {callback_id}"] = (again, content_type)
    return found


async def _matching(listeners: list[Any], request: AsyncBoltRequest) -> list[str]:
    return [f"{listener.ack_function.__module__}.{listener.ack_function.__name__}" for listener in listeners
            if await listener.async_matches(req=request, resp=BoltResponse(status=200))]


async def test_no_request_is_matched_by_two_listeners_before_the_fallback(start_app):
    bot = await start_app(RoutingModel(), [refund_charge])
    listeners = bot.slack._async_listeners  # (Bolt's own list, in the order it tries them)
    ours = [listener for listener in listeners if listener.ack_function.__module__ != "handlers.fallback"]
    assert ours and listeners[: len(ours)] == ours  # the fallback's come last
    [assistant] = [m for m in bot.slack._async_middleware_list if isinstance(m, ThreadsAssistant)]
    its = [listener for group in (assistant._thread_started_listeners, assistant._thread_context_changed_listeners,
                                  assistant._user_message_listeners, assistant._bot_message_listeners)
           for listener in group or []]

    seen: dict[str, list[str]] = {}
    for name, (payload, content_type) in _requests().items():
        body = encode(payload, content_type)
        request = AsyncBoltRequest(body=body.decode(), headers=signed(body, content_type))
        seen[name] = await _matching(ours, request)
        assert len(seen[name]) <= 1, (name, seen[name])
        if not (is_assistant_event(request.body) or is_other_message_sub_event_in_assistant_thread(request.body)):
            assert await _matching(its, request) == [], name  # (what the assistant middleware is not asked about)
    # (the ids reach the listeners they name: the check above is not vacuous)
    assert seen["event app_mention"] == ["handlers.events.on_mention"]
    clicks = [k for k in seen if re.search(r"^block_actions .* hitl:", k)]
    assert clicks and all(seen[k] == ["handlers.answers.on_action"] for k in clicks)
    assert any(seen[k] == ["handlers.feedback.on_feedback"] for k in seen)
    assert seen["event agent_session_stopped"] == ["handlers.stop.on_stopped"]
