"""What an approve cycle writes for retention, as Redis sees it (``MONITOR``): a session's end is written
once per unit of work by its owner, never renewed on every write (DESIGN §12 Retention). On the engine's
runtime over a real Valkey, with the retention shortened as in tests/engine/test_retention.py."""

from __future__ import annotations

from benchmarks.budgets.redis_monitor import monitored
from bot.approval import always
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from tests.engine.harness import approve, recording_tool, say
from tests.engine.test_retention import _runtime


async def test_an_approve_cycle_renews_no_end_and_asks_no_retention_question(redis, redis_url):
    """A session's end is written once per unit of work by its owner, not renewed on every
    write. In one approve cycle no session key gets an end (``PEXPIRE``) or loses one (``PERSIST``) but the
    settled request's own record, and no script asks whether a request is open (``EXISTS P:open``); the
    settle's one look at whether its turn is still there stays (it decides "approved" from "no longer
    needed"). What the user sees is unchanged: the approved call runs and the turn answers."""
    deploy, runs = recording_tool("deploy", approval=always())
    runtime, channel, store = _runtime(redis, ScriptedModel([call("deploy"), model_say("deployed")]), [deploy])
    async with monitored(redis_url) as seen:
        await say(runtime, "deploy")
        [req] = channel.requests()
        await approve(runtime, req.request_id)

    assert len(runs) == 1 and [e.text for e in channel.of("message.completed")] == ["deployed"]
    renewed = [c for c in seen.commands if c[0].upper() in ("PEXPIRE", "PERSIST", "EXPIRE")
               and not c[1].strip('"').endswith((f":req:{req.request_id}", f":req:{req.request_id}:ok"))]
    assert renewed == [], renewed
    asked = [c for c in seen.commands if c[0].upper() == "EXISTS"]
    assert all(c[1].strip('"').endswith(":state") for c in asked) and len(asked) <= 1, asked
