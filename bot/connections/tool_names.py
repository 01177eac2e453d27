"""Tool names every model API accepts (OpenAI's function names: ``^[a-zA-Z0-9_-]{1,64}$``), made from
names other systems chose (an MCP server's tool, an OpenAPI operationId such as ``repos/get``)."""

from __future__ import annotations

import hashlib
import re

NAME_LIMIT = 64
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def model_safe_name(plain: str, *, identity: str) -> str:
    """``plain`` if it fits; else its unsafe characters replaced by ``_``, cut to fit, and ending in 6 hex
    digits of a hash of ``identity`` (what the name stands for, stable across restarts), so two names
    that only differ in what was replaced never meet ("files.read" and "files_read" stay apart)."""
    safe = _UNSAFE.sub("_", plain)
    if safe == plain and 0 < len(safe) <= NAME_LIMIT:
        return safe
    digest = hashlib.sha256(identity.encode()).hexdigest()[:6]
    return f"{safe[: NAME_LIMIT - 7]}_{digest}"
