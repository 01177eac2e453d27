"""Where an OpenAPI connection's document comes from, and which server its calls (and their credential) go to.

A document is a file or an http(s) URL (JSON or YAML). A fetched one is followed through redirects only on
the host the operator configured, and without ``base_url`` it may only name a server on that host: another
host's document could send the connection's credential anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import yaml

from bot.ops import logs

FETCH_TIMEOUT_S = 30.0
MAX_REDIRECTS = 5  # when fetching a document, and only on the host it was configured at


class OpenAPIError(ValueError):
    """A connection that can't be loaded; the message names the connection and what to fix."""


def load_document(spec: str, *, relative_to: Path | None = None) -> dict[str, Any]:
    """An OpenAPI document from a file or an http(s) URL (JSON or YAML)."""
    if spec.startswith(("http://", "https://")):
        text = _fetch(spec)
    else:
        path = Path(spec) if relative_to is None or Path(spec).is_absolute() else relative_to / spec
        text = path.read_text()
    document = _parse(text)
    if not isinstance(document, dict) or not str(document.get("openapi", "")).startswith("3"):
        raise OpenAPIError(f"{spec} is not an OpenAPI 3 document")
    return document


def _fetch(spec: str) -> str:
    """GET the document at ``spec``, following redirects only on the host the operator configured: another
    host's document could name any server, and the credential goes to the document's server."""
    url = httpx.URL(spec)
    with httpx.Client(timeout=FETCH_TIMEOUT_S, follow_redirects=False) as http:
        for _ in range(MAX_REDIRECTS + 1):
            response = http.get(url)
            if not response.is_redirect:
                return response.raise_for_status().text
            target = url.join(response.headers["location"])
            if _origin(target) != _origin(httpx.URL(spec)):
                raise OpenAPIError(f"{logs.redact_url(spec)} redirects to {logs.redact_url(str(target))}, another "
                                   "host: set spec to where the document is served")
            url = target
    raise OpenAPIError(f"{logs.redact_url(spec)}: more than {MAX_REDIRECTS} redirects")


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port or {"http": 80, "https": 443}.get(url.scheme)


def server_url(name: str, spec_at: str, base_url: str | None, document: dict[str, Any]) -> str:
    """``base_url``, else the document's first server. A document fetched from a URL may only name a server
    on that URL's host (relative ones resolve against it): the credential is sent where the operator said."""
    if base_url:
        return base_url
    named = (document.get("servers") or [{}])[0].get("url")
    if not named:
        raise OpenAPIError(f"BOT_OPENAPI {name}: set base_url (the document names no server)")
    if not spec_at.startswith(("http://", "https://")):
        return str(named)  # a file the operator keeps: its servers are theirs
    spec = httpx.URL(spec_at)
    try:
        resolved = spec.join(str(named))
    except httpx.InvalidURL:
        resolved = httpx.URL("invalid:")  # a templated server ({region}…): base_url says which
    if _origin(resolved) != _origin(spec):
        raise OpenAPIError(f"BOT_OPENAPI {name}: the document at {logs.redact_url(spec_at)} "
                           f"names the server {logs.redact_url(str(named))}, on another host; set base_url to the "
                           "API's URL (calls and their credential go only where you configured)")
    return str(resolved)


def _parse(text: str) -> Any:
    # JSON is YAML, but a YAML parser takes ~20 s over GitHub's 13 MB description and json well under 1 s
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass  # YAML in flow style, perhaps
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
