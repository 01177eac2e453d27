"""The app's manifest (``manifest.yml`` at the repository root): the one source of the scopes a token has.

Slack grants an installed app the bot scopes its configuration lists (``oauth_config.scopes.bot``); a call
needing any other answers ``missing_scope``. LocalSlack reads the same file the app is created from, so a
scope the code needs but the manifest lacks fails here exactly as it would in a real workspace.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

MANIFEST_PATH = Path(__file__).resolve().parents[1] / "manifest.yml"


def load_manifest(path: Path | None = None) -> dict[str, Any] | None:
    path = path or MANIFEST_PATH
    try:
        loaded = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return None
    return loaded if isinstance(loaded, dict) else None


def bot_scopes(path: Path | None = None) -> list[str] | None:
    """``oauth_config.scopes.bot`` of the manifest, or None when there is no manifest to read (then
    LocalSlack does not check scopes, and says so in its log)."""
    manifest = load_manifest(path)
    if manifest is None:
        log.warning("no manifest at %s: scopes are not checked", path or MANIFEST_PATH)
        return None
    scopes = (((manifest.get("oauth_config") or {}).get("scopes") or {}).get("bot")) or []
    return [str(s) for s in scopes]


def org_deploy_enabled(path: Path | None = None) -> bool:
    manifest = load_manifest(path) or {}
    return bool((manifest.get("settings") or {}).get("org_deploy_enabled"))
