"""What this process knows of a session while it delivers the session's events (one delivery pass).

Between ``outbox_begin`` and ``outbox_end`` (store/outbox.py) the deliverer lock makes this process the only
one posting for the session, so the pass reads where the session's posts are (store/post_ledger.py) from
what it read at its start, kept current by its own writes, and keeps some writes for its closing round trip.
The outbox opens and closes a pass's view; the post ledger reads and writes through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.protocol import Event, RequestRecord
from bot.session import SessionRef
from store.pipelined import Command

CLAIM_MARGIN_S = 12.0  # a post is claimed in memory only while its pass's lock has this much life left

UNREAD: str = "?unread"  # the session's audit progress was not read with the begin


@dataclass
class PassAuditView:
    """What the audit's part of a pass works from (store/audit_events.py): the session, the events the pass
    read and the id it read after, the audit's floor as the begin read it ('' none) and the session's audit
    progress (None: nothing audited; ``UNREAD``: not read)."""

    ref: SessionRef
    read: list[tuple[str, Event]]
    read_after: str
    floor: str
    progress: str | None
    full: bool  # the read stopped at its count: there may be more


@dataclass
class PassView:
    """A delivery pass's view of its session's frontend data (``chan``): what it read at its start, with its
    own writes since; ``pending``: those to write at its end;
    ``requests``: the request records its consumers read (``pass_request``), read once per pass: those its
    events name for a card's update come with its begin.
    ``claimed``: posts claimed in the pass's memory (``PostLedger.claim(..., in_pass=True)``) and neither
    recorded nor given up yet: written as claims with the pass's next save (a post whose answer was lost)."""

    token: str
    fields: dict[str, str]
    careful: bool = False  # the last deliverer died mid-pass: look in the thread before posting
    lock_fresh_until: float = 0.0  # monotonic: until then no other deliverer can take the session over
    claimed: dict[str, str] = field(default_factory=dict)  # posts claimed in memory, not yet recorded
    pending: dict[str, str] = field(default_factory=dict)
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    audit: PassAuditView | None = None


@dataclass
class BeginWithCheckpoint:
    """What a checkpoint sends after its script to begin a delivery pass in its round trip (``bot.engine.outbox.
    PassOpening``; ``RedisOutbox.begin_with_checkpoint``): ``commands`` (the begin's, scripts among them:
    ``scripts``), and ``finish``, which takes their replies and sets the opening's pass when the lock was taken."""

    redis: Any  # the client it was built for: sent only by a store on the same one
    commands: list[Command]
    scripts: list[Any]
    finish: Callable[[list[Any]], None]

    def after(self, replies: list[Any]) -> list[Any]:
        """The replies to what came before the begin (the pipeline was sent not raising on errors). The
        begin's are read first, so a lock it took is never left without its pass; then the first error of
        the others is raised."""
        own = replies[:len(replies) - len(self.commands)]
        self.finish(replies[len(own):])
        for reply in own:
            if isinstance(reply, BaseException):
                raise reply
        return own


PassViews = dict[str, PassView]  # session id → its pass's view, while this process delivers it
