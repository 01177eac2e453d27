"""Thumbs up / down on the agent's answers (Slack's feedback buttons), recorded in the audit log.

Each click is one ``feedback`` entry in the workspace's audit log: who, which answer (channel + ts), and
positive or negative. It is written before the ack, so a click Slack saw acknowledged is never lost.
Slack shows the chosen thumb itself: no message is sent back, and no call is spent.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from blocks.answers import FEEDBACK_ACTION, feedback_value
from handlers.identity import installation_team, interaction_principal
from handlers.shared.deps import SlackDeps
from store.audit import AuditLog

log = logging.getLogger(__name__)

FEEDBACK_KIND = "feedback"


def register(app: AsyncApp, deps: SlackDeps) -> None:
    audit = deps.audit

    async def on_feedback(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await record_feedback(audit, body, action)
        await ack()

    app.action(FEEDBACK_ACTION)(on_feedback)


async def record_feedback(audit: AuditLog, body: dict[str, Any], action: dict[str, Any]) -> None:
    verdict, team, who = feedback_value(action), installation_team(body), interaction_principal(body)
    container = body.get("container") or {}
    answer_ts = container.get("message_ts") or (body.get("message") or {}).get("ts")
    if verdict is None or team is None or who is None or not answer_ts:
        log.info("a feedback click without an answer, a verdict or a person; ignored")
        return
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    await audit.append(
        team,
        FEEDBACK_KIND,
        actor=who.principal_id,
        subject=f"{channel}:{answer_ts}",
        data={"answer_ts": answer_ts, "channel": channel, "feedback": verdict, "user": who.slack_user_id},
    )
