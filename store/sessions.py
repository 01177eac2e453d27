"""The engine's one session store: its turns and their delivery, joined (DESIGN §9, §12).

The session store is split along the engine's ports: the turns (store/turns.py, ``RedisTurns``), the
outbox (store/outbox.py, ``RedisOutbox``) and the Slack post ledger (store/post_ledger.py, ``PostLedger``,
reached as ``posts``), over shared key names (store/session_keys.py). ``bot.turns.Runtime`` takes one
object for the turns and their outbox (``bot.parts.TurnStore`` extends ``bot.outbox.OutboxStore``), so this
class joins the two; it adds nothing of its own. Code that needs one port takes that class instead.
"""

from __future__ import annotations

from store.outbox import RedisOutbox
from store.turns import RedisTurns


class SessionStore(RedisTurns, RedisOutbox):
    """Turns and outbox over one client (each part's ``__init__`` passes the same arguments on)."""


__all__ = ["SessionStore"]
