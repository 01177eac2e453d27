"""How bot/app.py joins the parts: each store is built once, with what
it needs, and handed to every part that uses it; nothing is completed after construction."""

from __future__ import annotations

from bot.models.scripted import ScriptedModel


async def test_the_runtime_gets_the_policy_source_that_the_listeners_and_app_home_read(local_slack, start_app):
    """Built before the runtime (no ``parts.policies = ...`` afterwards): the policies' ``ctx.policies``, the
    admission rule and App Home's approver lists are one object, so an edit is seen by all at once."""
    bot = await start_app(ScriptedModel([]), [])

    source = bot.runtime.parts.policies
    assert source is not None
    assert bot.deps.policies is source and bot.deps.governance.source is source
    assert bot.deps.governance.policies is source.policies and bot.deps.governance.admins is source.admins


async def test_one_audit_log_per_process(local_slack, start_app):
    """The delivery passes' audit, the listeners' (feedback) and the approver-list edits' share one log: its
    per-workspace locks queue this process's appends, and what it knows of each chain's head is one."""
    bot = await start_app(ScriptedModel([]), [])

    assert bot.outbox_store.audit is not None and bot.outbox_store.audit.audit is bot.deps.audit
    assert bot.deps.governance.audit is bot.deps.audit


async def test_the_turns_and_their_delivery_are_two_stores(local_slack, start_app):
    """No store joins every port: the runtime's parts reach the turns, its outbox the delivery store."""
    bot = await start_app(ScriptedModel([]), [])

    assert bot.runtime.store is bot.store and bot.runtime.outbox.store is bot.outbox_store
    assert not hasattr(bot.store, "outbox_begin") and not hasattr(bot.outbox_store, "commit")
