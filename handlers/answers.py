"""Answers from Slack: buttons, selects and the answer modals (DESIGN §10, §12): "Type your own
answer", "Cancel with reason", "Edit & approve" and "Open form". Every one of them becomes an ``InputResponse``
settled by ``Runtime.answer`` — the one settle path.

A click acknowledged is a click recorded: the answer is settled in Redis first (two round trips;
the response policy gets a bounded wait), then Slack gets its ack, then the slow work (resuming
the turn, the model, the tools, notes to the clicker) runs in a tracked background task. Nothing
here waits on Slack before the ack: card updates are delivered by the outbox.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from blocks.actions import (
    ACTION_ID_PATTERN,
    EDIT_BLOCK_PREFIX,
    EDIT_CALLBACK_ID,
    FORM_BLOCK_PREFIX,
    FORM_CALLBACK_ID,
    FREEFORM_BLOCK_ID,
    FREEFORM_CALLBACK_ID,
    MODAL_CONTROLS,
    REASON_BLOCK_ID,
    REASON_CALLBACK_ID,
    decode_action_id,
    decode_modal_metadata,
    decode_option_value,
)
from blocks.ephemeral import already_settled_text, not_found_text, refused_text, result_token_text
from blocks.forms import form_blocks, parse_form_state, unshowable_fields
from blocks.modals import edit_modal, form_modal, freeform_answer, freeform_modal, reason_modal, reason_text
from blocks.outcomes import resolution_label
from bot.engine.result_tokens import TOKEN_TTL_S, issue_token
from bot.engine.settle import NOT_EDITABLE
from bot.engine.turns import AnswerResult
from bot.forms import FormSchemaError, model_from_schema
from bot.ops.logs import content
from bot.principals import Principal
from bot.protocol import APPROVE, CANCEL, InputResponse, RequestRecord, UnknownRequest
from handlers.delivery.private_notes import tell_privately
from handlers.identity import interaction_principal
from handlers.outage import READ_BUDGET_S, read_in_time, store_down
from handlers.shared.deps import SlackDeps

log = logging.getLogger(__name__)

ACK_BUDGET_SECONDS = 2.0  # Slack allows 3 s; keep a margin for the network
CHECK_BEFORE_FORM_S = 1.0  # a modal's trigger lasts 3 s: ask the response policy only this long first
PROBE_S = 0.4  # an answer from a kept record still unsettled after READ_BUDGET_S: is the store there at all?


def register(app: AsyncApp, deps: SlackDeps) -> None:
    async def on_action(ack: Any, body: dict[str, Any], action: dict[str, Any], client: AsyncWebClient) -> None:
        await _on_action(deps, ack, body, action, client)

    async def on_freeform_submit(ack: Any, body: dict[str, Any], view: dict[str, Any], client: AsyncWebClient) -> None:
        await _on_freeform_submit(deps, ack, body, view, client)

    async def on_reason_submit(ack: Any, body: dict[str, Any], view: dict[str, Any], client: AsyncWebClient) -> None:
        await _on_reason_submit(deps, ack, body, view, client)

    async def on_edit_submit(ack: Any, body: dict[str, Any], view: dict[str, Any], client: AsyncWebClient) -> None:
        await _on_edit_submit(deps, ack, body, view, client)

    async def on_form_submit(ack: Any, body: dict[str, Any], view: dict[str, Any], client: AsyncWebClient) -> None:
        await _on_form_submit(deps, ack, body, view, client)

    app.action(ACTION_ID_PATTERN)(on_action)
    app.view(FREEFORM_CALLBACK_ID)(on_freeform_submit)
    app.view(REASON_CALLBACK_ID)(on_reason_submit)
    app.view(EDIT_CALLBACK_ID)(on_edit_submit)
    app.view(FORM_CALLBACK_ID)(on_form_submit)


async def _on_action(deps: SlackDeps, ack: Any, body: dict[str, Any], action: dict[str, Any], client: Any) -> None:
    decoded = decode_action_id(action.get("action_id", ""))
    principal = interaction_principal(body)
    if decoded is None or principal is None:
        await ack()
        return
    started = time.monotonic()
    # an answer (not a form or a token) starts from the record as this process parked or last read it, if
    # it kept one: the settle checks its revision and, if the request changed since, the answer is checked
    # again against the stored one (bot.engine.settle), so a stale copy never decides it
    settles = decoded.control not in MODAL_CONTROLS and decoded.control != "token"
    kept = deps.store.recent_request(decoded.request_id) if settles else None
    try:
        async with read_in_time():  # a hung store: "try again" in time (handlers.outage), not Slack's timeout
            record = kept or await deps.store.get_request(decoded.request_id)
    except UnknownRequest:
        await ack()
        deps.tasks.spawn(_tell(client, body, principal.slack_user_id, None, not_found_text()),
                         what="tell about an unknown request")
        return
    if decoded.control == "token":
        await ack()
        deps.tasks.spawn(_send_token(deps, client, body, principal, record), what=f"result token for {record.request_id}")
        return
    if decoded.control in MODAL_CONTROLS:
        await ack()
        deps.tasks.spawn(_open_modal(deps, client, body, principal, record, decoded.control),
                         what=f"open the {decoded.control} form of {record.request_id}")
        return
    raw_value = action.get("value") if action.get("type") == "button" else (action.get("selected_option") or {}).get("value")
    response = _clicked(record, decoded.control, raw_value, principal).model_copy(
        update={"reply_to": where_clicked(body)})
    # the ack budget counts from the click's arrival, the read above included
    await settle_ack_spawn(deps, ack, client, body, response, record, what="answer", kept=kept is not None,
                           budget_s=max(ACK_BUDGET_SECONDS - (time.monotonic() - started), 0.1))


async def _send_token(deps: SlackDeps, client: Any, body: dict[str, Any], principal: Principal,
                      record: RequestRecord) -> None:
    """A result token for an external call, privately, to someone its response policy admits."""
    user_id = principal.slack_user_id
    if record.status != "open":
        await _tell(client, body, user_id, record, _settled_text(record))
        return
    if deps.result_key is None or record.request.kind != "external-result":
        await _tell(client, body, user_id, record, "Results can only be submitted from the card here.")
        return
    decision = await deps.runtime.check_response(record, principal, APPROVE, within_s=CHECK_BEFORE_FORM_S)
    if decision is None or decision.type != "allowed":
        await _tell(client, body, user_id, record, refused_text(decision.reason if decision else None))
        return
    now = deps.runtime.settings.clock()
    token = issue_token(deps.result_key, record.request_id, principal, now=now)
    url = deps.result_url(record.request_id)
    expires = datetime.fromtimestamp(now + TOKEN_TTL_S, UTC)
    await _tell(client, body, user_id, record, result_token_text(record.request, url, token, expires))


def where_clicked(body: dict[str, Any]) -> dict[str, str]:
    """Where a click was made, for a private note back to the clicker (``InputResponse.reply_to``): App
    Home (no channel: a DM), or the channel and thread of the message clicked — an approver's DM copy is
    its own conversation, not the card's thread."""
    if (body.get("view") or {}).get("type") == "home":
        return {"surface": "home"}
    channel = (body.get("channel") or {}).get("id")
    if not isinstance(channel, str) or not channel:
        return {}
    message = body.get("message") or {}
    thread = message.get("thread_ts") or (body.get("container") or {}).get("thread_ts")
    return {"channel_id": channel, "thread_ts": thread if isinstance(thread, str) else ""}


def _clicked(record: RequestRecord, control: str, raw_value: str | None, principal: Principal) -> InputResponse:
    """The answer a click or a menu choice gives: an option, or "approve, don't ask again in <scope>"."""
    if control == "grant":
        scope = raw_value if raw_value in ("conversation", "requester") else None
        return InputResponse(request_id=record.request_id, option_id=APPROVE if scope else None,
                             grant=scope, principal=principal)  # type: ignore[arg-type]  # checked above
    option_id = decode_option_value(record.request, raw_value)
    return InputResponse(request_id=record.request_id, option_id=option_id, principal=principal)


async def _open_modal(deps: SlackDeps, client: Any, body: dict[str, Any], principal: Principal,
                      record: RequestRecord, control: str) -> None:
    user_id = principal.slack_user_id
    if record.status != "open":
        await _tell(client, body, user_id, record, _settled_text(record))
        return
    req = record.request
    # don't let someone fill in a form only to be refused at the end (an approval's "Reply instead" included:
    # its words count only from whom the response policy lets approve)
    if control != "freeform" or req.kind == "tool-approval":
        decision = await deps.runtime.check_response(record, principal, CANCEL if control == "reason" else APPROVE,
                                                     within_s=CHECK_BEFORE_FORM_S)
        if decision is not None and decision.type == "rejected":
            await _tell(client, body, user_id, record, refused_text(decision.reason))
            return
    where = body.get("container") or {}
    channel_id, message_ts = where.get("channel_id", ""), where.get("message_ts", "")
    if control == "reason":
        view = reason_modal(req, channel_id, message_ts)
    elif control == "edit":
        model = _arguments_model(deps, record)
        if model is None:
            await _tell(client, body, user_id, record, NOT_EDITABLE)
            return
        proposed_input = req.action.input if req.action else {}
        if misfits := unshowable_fields(model, proposed_input or {}):  # an untouched form would change them
            await _tell(client, body, user_id, record,
                        f"{NOT_EDITABLE} (a form can't show {', '.join(misfits)} as proposed)")
            return
        form = form_blocks(model, proposed_input, block_prefix=EDIT_BLOCK_PREFIX)
        view = edit_modal(req, form, channel_id, message_ts)
    elif control == "form":
        model = _form_model(record)
        if model is None:
            await _tell(client, body, user_id, record, "This form can't be shown; the agent asked for it wrongly.")
            return
        view = form_modal(req, form_blocks(model, block_prefix=FORM_BLOCK_PREFIX), channel_id, message_ts)
    else:
        view = freeform_modal(req, channel_id, message_ts)
    try:
        await client.views_open(trigger_id=body.get("trigger_id"), view=view)
    except SlackApiError as exc:  # an expired trigger (Slack gives 3 s), a modal already open…
        log.warning("could not open the %s form for %s: %s", control, record.request_id, exc.response.get("error"))
        await _tell(client, body, user_id, record, "The form couldn't be opened just now; click its button again.")


def _arguments_model(deps: SlackDeps, record: RequestRecord) -> Any:
    """The pydantic model an editable request's arguments are edited with (None: not editable here)."""
    action = record.request.action
    tool = deps.runtime.tools.get(action.tool_name) if action else None
    if not record.request.editable or tool is None or not tool.editable:
        return None
    return tool.input_model


def _form_model(record: RequestRecord | None) -> Any:
    """The pydantic model a "user-input" request's form is read with (None: it has no usable form)."""
    if record is None or record.request.kind not in ("user-input", "external-result"):
        return None
    try:
        return model_from_schema(record.request.form or {})
    except FormSchemaError:
        log.warning("request %s carries a form that cannot be shown", record.request_id, exc_info=True)
        return None


async def _finish(deps: SlackDeps, client: Any, body: dict[str, Any], user_id: str | None,
                  task: asyncio.Task[AnswerResult], *, quiet_refusals: bool = False) -> None:
    try:
        result = await task
    except UnknownRequest:  # gone since this process kept its record (``recent_request``)
        await _tell(client, body, user_id, None, not_found_text())
        return
    await _after_answer(deps, client, body, user_id, result, quiet_refusals=quiet_refusals)


async def _on_freeform_submit(deps: SlackDeps, ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
    text = freeform_answer(_state(view))
    if not text:
        await ack(response_action="errors", errors={FREEFORM_BLOCK_ID: "Type an answer first."})
        return
    await _submit(deps, ack, body, view, client, FREEFORM_BLOCK_ID, lambda rid: {"request_id": rid, "text": text})


async def _on_reason_submit(deps: SlackDeps, ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
    note = reason_text(_state(view))
    await _submit(deps, ack, body, view, client, REASON_BLOCK_ID,
                  lambda rid: {"request_id": rid, "option_id": CANCEL, "note": note})


async def _modal_record(deps: SlackDeps, view: dict[str, Any]) -> RequestRecord | None:
    """The request a submitted modal answers (None: not ours, or gone)."""
    meta = decode_modal_metadata(view.get("private_metadata"))
    try:
        return await deps.store.get_request(meta.request_id) if meta else None
    except UnknownRequest:
        return None


async def _on_edit_submit(deps: SlackDeps, ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
    record = await _modal_record(deps, view)
    model = _arguments_model(deps, record) if record is not None else None
    if record is None or model is None:
        await ack()  # a form for a request that is gone (or was never editable): nothing to settle
        return
    edited = await _filled_in(ack, model, view, EDIT_BLOCK_PREFIX)
    if edited is None:
        return
    changed = edited.model_dump(mode="json", by_alias=True)
    proposed = _proposal(model, record)
    await _submit(deps, ack, body, view, client, _first_block(model, EDIT_BLOCK_PREFIX), lambda rid: {
        "request_id": rid, "option_id": APPROVE, "edited_input": None if edited == proposed else changed,
    }, record=record)


async def _on_form_submit(deps: SlackDeps, ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any) -> None:
    record = await _modal_record(deps, view)
    model = _form_model(record)
    if record is None or model is None:
        await ack()  # a form for a request that is gone: nothing to settle
        return
    filled = await _filled_in(ack, model, view, FORM_BLOCK_PREFIX)
    if filled is None:
        return
    values = filled.model_dump(mode="json", by_alias=True)
    await _submit(deps, ack, body, view, client, _first_block(model, FORM_BLOCK_PREFIX),
                  lambda rid: {"request_id": rid, "values": values}, record=record)


async def _filled_in(ack: Any, model: Any, view: dict[str, Any], block_prefix: str) -> Any:
    """The submitted form as ``model``, or None once Slack was told what to fix (inline, under each field)."""
    filled, errors = parse_form_state(model, _state(view), block_prefix=block_prefix)
    if filled is None:
        await ack(response_action="errors", errors=errors)
    return filled


def _first_block(model: Any, block_prefix: str) -> str:
    """Where a refusal of the whole form shows: under its first field."""
    return f"{block_prefix}{next(iter(model.model_fields))}"


def _proposal(model: Any, record: RequestRecord) -> Any:
    """The proposed arguments as the model parses them (None if they no longer parse), so an untouched
    form compares equal however its values were spelled (datetimes, aliases, numbers)."""
    try:
        return model.model_validate((record.request.action.input if record.request.action else None) or {})
    except ValueError:
        return None


def _state(view: dict[str, Any]) -> dict[str, Any]:
    return (view.get("state") or {}).get("values") or {}


async def _submit(deps: SlackDeps, ack: Any, body: dict[str, Any], view: dict[str, Any], client: Any,
                  error_block: str, response_fields: Any, *, record: RequestRecord | None = None) -> None:
    """Settle what a modal submitted; a refusal shows in the modal, under ``error_block``, when the
    response policy answers within the ack budget (else privately, after the ack)."""
    meta = decode_modal_metadata(view.get("private_metadata"))
    principal = interaction_principal(body)
    if meta is None or principal is None:
        await ack()
        return
    if record is None:
        try:
            record = await deps.store.get_request(meta.request_id)
        except UnknownRequest:
            await ack(response_action="errors", errors={error_block: not_found_text()})
            return
    response = InputResponse(principal=principal, **response_fields(record.request_id))
    await settle_ack_spawn(deps, ack, client, body, response, record, what="modal answer",
                           budget_s=ACK_BUDGET_SECONDS, refusal=lambda result: _modal_refusal(result, error_block))


def _modal_refusal(result: AnswerResult, error_block: str) -> dict[str, str] | None:
    """The modal's inline error for an answer that did not count (None: it counted, or is pending)."""
    if result.state in ("rejected", "failed", "forbidden"):
        return {error_block: refused_text(result.reason)}
    if result.state in ("stale", "invalid"):
        return {error_block: result.reason if result.state == "invalid" and result.reason
                else _settled_text(result.record)}
    return None


async def settle_ack_spawn(
    deps: SlackDeps, ack: Any, client: Any, body: dict[str, Any], response: InputResponse, record: RequestRecord,
    *, what: str, budget_s: float, refusal: Callable[[AnswerResult], dict[str, str] | None] | None = None,
    kept: bool = False,
) -> None:
    """Settle, ack, then spawn: the order every answer from Slack follows (DESIGN §10).

    The answer is settled in Redis first, waited for at most ``budget_s`` (the response policy may be
    slow; the settle goes on in the background either way), so a click acknowledged is a click recorded.
    With ``refusal`` (a modal), a refusal known in time is the ack itself: the modal shows it under its
    input, and is not told again after the ack. Then the ack, then the notes to the clicker in the
    listeners' own tasks; the turn is resumed by the engine (``Runtime.receive_answer``), never here.

    A store that cannot be reached is the person's "try again" (handlers.outage), as when the read before it
    fails: the settle's own failure within the budget is raised; and ``kept`` (the record was this process's
    copy: no read went first), a settle still under way after ``READ_BUDGET_S`` has the store probed, and
    a store that does not answer the probe in ``PROBE_S`` is one that hangs.
    """
    rid = record.request_id
    task = deps.runtime.receive_answer(response, record=record)  # (the engine resumes the turn itself)
    started = time.monotonic()
    done, _ = await asyncio.wait({task}, timeout=min(budget_s, READ_BUDGET_S) if kept else budget_s)
    if not done and kept:
        async with read_in_time(PROBE_S):  # raises StoreTooSlow: the store hangs
            await deps.store.ping()
        done, _ = await asyncio.wait({task}, timeout=max(budget_s - (time.monotonic() - started), 0))
    if done and (failed := task.exception()) is not None and store_down(failed):
        raise failed
    if done and refusal is not None and (errors := refusal(task.result())):
        await ack(response_action="errors", errors=errors)
        return
    await ack()
    quiet = bool(done) and refusal is not None  # the modal already showed any refusal inline
    deps.tasks.spawn(_finish(deps, client, body, response.principal.slack_user_id, task, quiet_refusals=quiet),
                     what=f"after {what} {rid}")


async def _after_answer(
    deps: SlackDeps, client: Any, body: dict[str, Any], user_id: str | None, result: AnswerResult,
    *, quiet_refusals: bool = False,
) -> None:
    """Explain the outcome privately where the card does not (the engine resumes the turn itself)."""
    if result.state == "stale":
        await _tell(client, body, user_id, result.record, _settled_text(result.record))
    elif result.state == "forbidden" and not quiet_refusals:
        await _tell(client, body, user_id, None, result.reason or "That answer cannot count.")
    elif result.state == "invalid":
        await _tell(client, body, user_id, result.record, result.reason or "That is not one of the options.")


def _settled_text(record: RequestRecord) -> str:
    if record.status == "open":
        return "That answer did not count; try again."  # (the settle re-reads a stale record, so rare)
    label = resolution_label(record.request, record.outcome or "ignored",  # type: ignore[arg-type]
                             record.response.option_id if record.response else None)
    decider = record.responder.slack_user_id if record.responder else None
    return already_settled_text(label, decider)


async def _tell(client: Any, body: dict[str, Any], user_id: str | None, record: RequestRecord | None, text: str) -> None:
    """A private note to the clicker, in the thread the card lives in; as a direct message when they
    clicked in App Home or cannot see that channel (an ephemeral there would never reach them)."""
    if not user_id:
        return
    from_home = (body.get("view") or {}).get("type") == "home"
    channel = None if from_home else (
        (body.get("channel") or {}).get("id") or (record.channel.get("channel_id") if record else None))
    same_place = record is not None and channel == record.channel.get("channel_id")  # not a DM copy of the card
    thread_ts = (body.get("message") or {}).get("thread_ts") or (record.channel.get("thread_ts") if same_place else None)
    try:
        await tell_privately(client, user_id, text, channel=channel, thread_ts=thread_ts)
    except Exception:  # noqa: BLE001 - a note that cannot be shown must not break the click
        log.warning("could not tell %s: %s", user_id, content(text), exc_info=True)  # may hold a token
