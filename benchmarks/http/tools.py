"""The bench's one tool, for both ways of starting the app (``start_bot(tools=...)`` and ``BOT_TOOLS``).

Its policy is ``always()``: every call parks on a card, and anyone in the channel may approve it.
It returns at once, so a cycle measures the app, not the tool. Its result carries the wall-clock time it
was made (``at``): the bench's model echoes it in the reply, so the bench can time result → reply.
"""

from __future__ import annotations

import time

from pydantic import BaseModel

from bot.approval import always
from bot.tools import tool


class Refund(BaseModel):
    charge_id: str
    amount: float


@tool(approval=always())
async def refund_charge(args: Refund) -> dict:
    """Refund a charge."""
    return {"refunded": args.charge_id, "at": time.time()}
