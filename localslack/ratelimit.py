"""Organic rate limits: what a flood of calls gets from Slack (HTTP 429, ``Retry-After``, ``ratelimited``).

Token buckets, one per key:

- per (workspace, method), refilled at the method's tier rate (Tier 2: 20/min, Tier 3: 50/min, Tier 4:
  100/min, Tier 1: 1/min) and holding one minute's worth, so N calls in any minute pass and call N+1
  inside that minute waits. Slack says "N+ per minute": N is the floor it promises, so LocalSlack
  enforces N.
- per (workspace, channel) for ``chat.postMessage``: one message a second, with a short burst.
  Slack: "generally allows posting one message per second per channel ... short bursts" — the burst size
  is not published; ``CHANNEL_POST_BURST`` is LocalSlack's choice.

Methods with "Special" limits and no published number (``auth.test``, ``chat.getPermalink``,
``oauth.v2.access``) are not limited. Tests can switch it all off (``enabled = False``) or tighten one
method (``limit("chat.update", per_minute=2)``) or the per-channel posts (``limit_channel_posts``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from localslack.methods import POSTS_PER_SECOND_PER_CHANNEL, TIER_PER_MINUTE, spec

CHANNEL_POST_BURST = 6  # LocalSlack's choice (Slack: "short bursts"); the bot bursts 4 then paces 1/s


@dataclass
class Limit:
    per_second: float
    burst: float


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimits:
    """Decides, call by call, whether Slack would answer 429 (and after how many seconds to retry)."""

    def __init__(self, *, enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.clock = clock
        self.tiers: dict[int, Limit] = {
            tier: Limit(per_second=n / 60.0, burst=float(n)) for tier, n in TIER_PER_MINUTE.items()
        }
        self.methods: dict[str, Limit] = {}
        self.channel_posts = Limit(per_second=POSTS_PER_SECOND_PER_CHANNEL, burst=CHANNEL_POST_BURST)
        self.limited: list[tuple[str, str, float]] = []  # (method, key, retry_after) of every 429 given
        self._buckets: dict[tuple[str, ...], _Bucket] = {}

    # ---- configuration (tests) -----------------------------------------------------------------------

    def limit(self, method: str, *, per_minute: float, burst: float | None = None) -> None:
        """Give ``method`` its own limit: ``per_minute`` refill, ``burst`` (default: one minute's worth)."""
        self.methods[method] = Limit(per_second=per_minute / 60.0, burst=per_minute if burst is None else burst)
        self._forget(method)

    def limit_channel_posts(self, *, per_second: float, burst: float) -> None:
        """chat.postMessage per channel (default: 1 a second, ``CHANNEL_POST_BURST`` at once)."""
        self.channel_posts = Limit(per_second=per_second, burst=burst)
        self._forget("chat.postMessage:channel")

    def reset(self) -> None:
        """Full buckets again (as if nobody had called for a minute)."""
        self._buckets.clear()

    def _forget(self, method: str) -> None:
        self._buckets = {k: v for k, v in self._buckets.items() if k[0] != method}

    # ---- the check -----------------------------------------------------------------------------------

    def check(self, method: str, workspace: str, channel: str | None = None) -> int | None:
        """Take a token for this call; None when it may proceed, else Slack's Retry-After in seconds."""
        if not self.enabled:
            return None
        checks: list[tuple[tuple[str, ...], Limit]] = []
        method_limit = self.methods.get(method)
        tier = spec(method).tier
        if method_limit is None and tier is not None:
            method_limit = self.tiers[tier]
        if method_limit is not None:
            checks.append(((method, workspace), method_limit))
        if method == "chat.postMessage" and channel:
            checks.append((("chat.postMessage:channel", workspace, channel), self.channel_posts))
        now = self.clock()
        waits = [self._wait(key, limit, now) for key, limit in checks]
        worst = max(waits, default=0.0)
        if worst > 0:
            retry_after = max(1, math.ceil(worst))
            self.limited.append((method, f"{workspace}/{channel}" if channel else workspace, retry_after))
            return retry_after
        for key, _ in checks:
            self._buckets[key].tokens -= 1.0
        return None

    def _wait(self, key: tuple[str, ...], limit: Limit, now: float) -> float:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=limit.burst, updated=now)
        bucket.tokens = min(limit.burst, bucket.tokens + (now - bucket.updated) * limit.per_second)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            return 0.0
        if limit.per_second <= 0:
            return 60.0
        return (1.0 - bucket.tokens) / limit.per_second
