"""The outbound Slack frontend: what goes to Slack from the engine's committed events and from tools.

Nothing here is a Bolt listener. The outbox (``bot.engine.outbox``) hands each consumer the session's events:
``channel`` (the thread: cards, answers, status lines, streams, tasks, agent-session status) and
``notices`` (approvers' DMs and channel notices); ``workspace`` is ``ctx.workspace`` for tools;
``pacing`` keeps every call inside Slack's rate limits; ``notes`` sends a private note to one person.
Listeners (``handlers/*.py``) may import from here; nothing here imports a listener or a route: what the
listeners and this room share is below both, in ``handlers.shared``.
"""
