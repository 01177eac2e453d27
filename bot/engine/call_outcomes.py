"""How a step's calls end (DESIGN §7): the answers to its requests applied to its calls, what the model
reads when a call does not run, and the ``action.result`` of every call that ended.
"""

from __future__ import annotations

import json
from typing import Any

from bot.agents import delegation_result, out_of_time
from bot.engine.execute import denied_output
from bot.engine.tool_registry import ToolRegistry
from bot.protocol import ActionResult, Answer, Event, RequestRecord
from bot.state import CallResult, StepState, TurnState

IGNORED_MESSAGE = "Ignored because the user continued without responding."
DENIED_MESSAGE = "Tool execution was denied."


def apply_resolutions(step: StepState, records: dict[str, RequestRecord], tools: ToolRegistry) -> None:
    """Each call waiting on a settled request (``records``) moves on: it is ready to run, or done with
    its result (an answer, a sub-agent's or an external result, or a rejection the model reads)."""
    for call in step.calls:
        if call.status == "awaiting" and call.request_id in records:
            record = records[call.request_id]
            call.request_id = None
            if record.request.kind == "delegation" and record.outcome == "answered" and record.response:
                call.status, call.result = "done", delegation_result(record.response.values)  # the sub-agent's answer
            elif record.request.kind == "external-result" and record.outcome == "answered" and record.response:
                # run elsewhere: what the person (or their system) sent is the call's result
                call.status, call.principal = "done", record.responder or call.principal
                call.result = CallResult(status="completed", output=record.response.values)
            elif record.outcome == "approved":
                call.status = "ready"
                call.principal = record.responder or call.principal
                edited = record.response.edited_input if record.response else None
                if edited is not None:  # "Edit & approve": it runs with what the approver submitted
                    call.edited_from, call.arguments = call.arguments, json.dumps(edited)
                    call.edited_by = record.responder
            else:
                call.status = "done"
                tool = tools.get(call.tool_name)
                call.result = CallResult(status="rejected",
                                         output=rejection(record, tool.denied_message if tool else None))
        elif call.status == "asking" and call.ask_request_id in records:
            record = records[call.ask_request_id]
            call.ask_request_id = None
            if record.outcome == "answered" and record.response is not None:
                call.asks.append(Answer(status="answered", option_id=record.response.option_id,
                                        text=record.response.text, values=record.response.values,
                                        responder=record.responder))
                call.status = "ready"
            elif record.outcome in ("ignored", "expired"):  # the tool goes on without an answer
                call.asks.append(Answer(status="interrupted" if record.outcome == "ignored" else "expired"))
                call.status = "ready"
            else:
                call.status = "done"
                call.result = CallResult(status="rejected", output={"status": "cancelled"})


def unreported_results(session_id: str, turn: TurnState) -> list[Event]:
    """An ``action.result`` for every call of the step that ended and was not reported yet."""
    assert turn.step is not None
    events: list[Event] = []
    for c in turn.step.calls:
        if c.status == "done" and c.result is not None and not c.reported:
            c.reported = True
            events.append(ActionResult(session_id=session_id, turn_id=turn.turn_id, call_id=c.call_id,
                                       tool_name=c.tool_name, status=c.result.status, output=c.result.output,
                                       error=c.result.error))
    return events


def rejection(record: RequestRecord, denied_message: str | None = None) -> dict[str, Any]:
    if record.outcome == "ignored":
        return denied_output(IGNORED_MESSAGE, status="ignored", request_id=record.request_id)
    if record.outcome == "cancelled":
        return denied_output("The turn was cancelled.", status="cancelled", request_id=record.request_id)
    if record.outcome == "expired" and record.request.kind == "delegation":
        return denied_output(out_of_time(record.request.agent), status="expired", request_id=record.request_id)
    if record.outcome == "expired":
        return denied_output("Nobody answered in time.", status="expired", request_id=record.request_id)
    output = denied_output(denied_message or DENIED_MESSAGE, status="denied", request_id=record.request_id)
    if record.note:
        who = record.responder.principal_id if record.responder else "the person who cancelled"
        output["note"] = f'{who} wrote: "{record.note}"'
    return output
