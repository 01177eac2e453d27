"""What the Slack listeners share: the runtime, the store and the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.config import Settings
from bot.turns import Runtime
from store.sessions import SessionStore


@dataclass
class SlackDeps:
    runtime: Runtime
    store: SessionStore
    settings: Settings
    governance: Any = None  # handlers.governance.Governance, when wired (App Home, /approvers)
    extras: dict[str, Any] = field(default_factory=dict)
