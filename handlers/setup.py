"""``python -m bot setup``: from nothing to a working app in a real Slack workspace.

It prints the link that creates the app from ``manifest.yml``, takes the two tokens (flags, the
environment, or typed without echo), checks them with Slack's own answers — ``auth.test`` and the scopes it
reports in ``x-oauth-scopes``, ``apps.connections.open`` for an app-level token — and writes ``.env`` only
when they pass. Every failure names the Slack page where it is fixed. Secrets are never printed.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import yaml
from dotenv import dotenv_values
from dotenv.parser import parse_stream
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import BOT_SCOPES

MANIFEST = Path(__file__).resolve().parents[1] / "manifest.yml"
CREATE_APP_URL = "https://api.slack.com/apps?new_app=1&manifest_yaml="
DEFAULT_API_URL = "https://slack.com/api/"

# What each of Slack's answers means for the person, and where they fix it.
BOT_TOKEN_ERRORS = {
    "invalid_auth": "the bot token is wrong or revoked — copy it again from OAuth & Permissions → "
                    "Bot User OAuth Token",
    "token_revoked": "the bot token was revoked (the app was uninstalled?) — open OAuth & Permissions, click "
                     "Install to Workspace, then copy the new Bot User OAuth Token",
    "account_inactive": "the app's bot user is deactivated — reinstall it under OAuth & Permissions → "
                        "Install to Workspace and copy the new Bot User OAuth Token",
    "not_allowed_token_type": "that is not a bot token — copy the Bot User OAuth Token (xoxb-…) from "
                              "OAuth & Permissions",
    "not_authed": "no bot token was sent — copy it from OAuth & Permissions → Bot User OAuth Token",
}
APP_TOKEN_ERRORS = {
    "invalid_auth": "the app-level token is wrong or revoked — create one under Basic Information → "
                    "App-Level Tokens with the connections:write scope, and copy it (xapp-…)",
    "token_revoked": "the app-level token was revoked — create a new one under Basic Information → "
                     "App-Level Tokens with the connections:write scope",
    "missing_scope": "the app-level token lacks connections:write — under Basic Information → App-Level "
                     "Tokens create one with the connections:write scope",
    "not_allowed_token_type": "that is not an app-level token — copy it (xapp-…) from Basic Information → "
                              "App-Level Tokens",
}


class SetupFailed(Exception):
    """A check failed; the message says what to fix and where."""


@dataclass
class Tokens:
    bot_token: str
    signing_secret: str | None
    app_token: str | None


async def setup_command(args: argparse.Namespace) -> int:
    interactive = sys.stdin.isatty()
    print("1. Create the Slack app from this project's manifest (pick your workspace, then Create):")
    print(f"   {create_app_url()}")
    print("2. Install it: OAuth & Permissions → Install to Workspace. Then paste its tokens below.\n")
    try:
        tokens = _tokens(args, interactive)
        await check_bot_token(tokens.bot_token, args.api_url)
        if tokens.app_token:
            await check_app_token(tokens.app_token, args.api_url)
            print("ok: Socket Mode connects with the app-level token (no public URL needed)")
        else:
            print("HTTP mode: Slack must reach this bot. In the app's settings turn Socket Mode off, then set the "
                  "Request URL to https://<your public host>/slack/events under Event Subscriptions, "
                  "Interactivity & Shortcuts, and each Slash Command (/approvers, /agent); the bot listens on "
                  "PORT (3000).")
        # an app token left from an earlier Socket Mode setup would keep the bot off HTTP: HTTP removes it
        values: dict[str, str | None] = {"SLACK_BOT_TOKEN": tokens.bot_token, "SLACK_APP_TOKEN": tokens.app_token}
        values |= {"SLACK_SIGNING_SECRET": tokens.signing_secret} if tokens.signing_secret else {}
        if args.api_url.rstrip("/") != DEFAULT_API_URL.rstrip("/"):
            values["SLACK_API_URL"] = args.api_url
        write_env(Path(args.env_file), values, overwrite=args.yes, interactive=interactive)
    except SetupFailed as exc:
        print(f"\nsetup stopped: {exc}", file=sys.stderr)
        return 1
    print(f"\nwrote {args.env_file} (only you can read it). Next: `make run` (or `python -m bot run`), then "
          "mention @agent in a channel you invite it to.")
    return 0


def create_app_url(manifest: Path = MANIFEST) -> str:
    """Slack's create-from-manifest link: the app's page opens with this manifest filled in."""
    return CREATE_APP_URL + quote(manifest.read_text(), safe="")


def manifest_scopes(manifest: Path = MANIFEST) -> list[str]:
    try:
        loaded = yaml.safe_load(manifest.read_text()) or {}
        return [str(s) for s in loaded["oauth_config"]["scopes"]["bot"]]
    except (OSError, KeyError, TypeError):
        return list(BOT_SCOPES)


def _tokens(args: argparse.Namespace, interactive: bool) -> Tokens:
    bot = args.bot_token or os.environ.get("SLACK_BOT_TOKEN") or _ask(
        "Bot User OAuth Token (OAuth & Permissions, xoxb-…): ", interactive, "--bot-token")
    if not bot.startswith("xoxb-"):
        raise SetupFailed("the bot token starts with xoxb- — copy the Bot User OAuth Token from OAuth & "
                          "Permissions (not the user token xoxp-, nor an app-level token xapp-)")
    app = args.app_token or os.environ.get("SLACK_APP_TOKEN")
    secret = args.signing_secret or os.environ.get("SLACK_SIGNING_SECRET")
    if not app and not secret:
        app = _ask("App-level token for Socket Mode (Basic Information → App-Level Tokens, xapp-…), "
                   "or Enter for HTTP mode: ", interactive, "--app-token or --signing-secret", optional=True)
    if not app and not secret:
        secret = _ask("Signing Secret (Basic Information → App Credentials): ", interactive, "--signing-secret")
    if app and not app.startswith("xapp-"):
        raise SetupFailed("the app-level token starts with xapp- — create one under Basic Information → "
                          "App-Level Tokens with the connections:write scope")
    return Tokens(bot_token=bot, signing_secret=secret or None, app_token=app or None)


def _ask(prompt: str, interactive: bool, flag: str, *, optional: bool = False) -> str:
    """Typed without echo at a terminal; read from piped input otherwise (never printed back)."""
    if interactive:
        value = getpass.getpass(prompt)
    else:
        print(prompt, flush=True)
        value = sys.stdin.readline()
    value = value.strip()
    if not value and not optional:
        raise SetupFailed(f"nothing was given: pass {flag} (or set it in the environment)")
    return value


async def check_bot_token(token: str, api_url: str) -> None:
    """auth.test says whose token it is; its ``x-oauth-scopes`` header says what it was granted."""
    try:
        resp = await AsyncWebClient(token=token, base_url=api_url).auth_test()
    except SlackApiError as exc:
        error = str(exc.response.get("error"))
        raise SetupFailed(f"{error}: {BOT_TOKEN_ERRORS.get(error, 'Slack refused the bot token')}") from None
    except (SlackClientError, OSError) as exc:
        raise SetupFailed(f"could not reach Slack at {api_url} ({type(exc).__name__}) — check the network, "
                          "or --api-url / SLACK_API_URL") from None
    print(f"ok: the bot token works: @{resp.get('user')} in {resp.get('team')}")
    header = next((v for k, v in resp.headers.items() if k.lower() == "x-oauth-scopes"), None)
    if header is None:  # Slack always sends it; a stand-in that does not cannot be checked
        print(f"note: {api_url} did not report the token's scopes (x-oauth-scopes): not checked")
        return
    granted = {s.strip() for s in header.split(",") if s.strip()}
    missing = [s for s in manifest_scopes() if s not in granted]
    if missing:
        raise SetupFailed(f"missing scopes: {', '.join(missing)} — add them under OAuth & Permissions → Scopes → "
                          "Bot Token Scopes, then reinstall the app (Install to Workspace) and run setup again")
    print("ok: the bot token has every scope the manifest asks for")


async def check_app_token(token: str, api_url: str) -> None:
    """An app-level token is only good for apps.connections.open: Socket Mode works if that answers a URL."""
    try:
        await AsyncWebClient(token=token, base_url=api_url).apps_connections_open(app_token=token)
    except SlackApiError as exc:
        error = str(exc.response.get("error"))
        fix = APP_TOKEN_ERRORS.get(error, "Slack refused it — check Socket Mode → Enable Socket Mode is on")
        raise SetupFailed(f"{error}: {fix}") from None
    except (SlackClientError, OSError) as exc:
        raise SetupFailed(f"could not reach Slack at {api_url} ({type(exc).__name__}) — check the network, "
                          "or --api-url / SLACK_API_URL") from None


def write_env(path: Path, values: dict[str, str | None], *, overwrite: bool, interactive: bool) -> None:
    """Set ``values`` in the env file (None: remove it), keeping its other lines; a different existing value
    changes only with --yes or a typed yes.

    The file is read as the bot's loader reads it (python-dotenv, through pydantic-settings: ``export``,
    quotes, spaces, any case), so a value in any form it accepts is seen, and replaced rather than doubled.
    It is written whole to a new file at mode 0600 beside it, then renamed over it: a failed or killed write
    leaves the old file as it was, and the secrets are never in a file others can read."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    bindings = list(parse_stream(io.StringIO(text)))
    existing = {name.upper(): value for name, value in dotenv_values(stream=io.StringIO(text)).items()}
    changed = [name for name, value in values.items() if name in existing and existing[name] != value]
    if changed and not overwrite:
        question = f"{path} already sets {', '.join(changed)}; change {'it' if len(changed) == 1 else 'them'}?"
        if not interactive:
            raise SetupFailed(f"{question} Left as it was: run again with --yes to change it")
        if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
            raise SetupFailed(f"{path} was left as it was")
    kept = [b.original.string for b in bindings if b.key is None or b.key.upper() not in values]
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    added = [f"{name}={_quoted(value)}\n" for name, value in values.items() if value is not None]
    try:
        _replace_privately(path, "".join([*kept, *added]))
    except OSError as exc:
        raise SetupFailed(f"could not write {path} ({exc.strerror or exc}); it was left as it was") from None


def _quoted(value: str) -> str:
    """The value as python-dotenv reads it back: bare when plain, else single-quoted (no expansion)."""
    if re.fullmatch(r"[A-Za-z0-9_\-.:/@+,]*", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _replace_privately(path: Path, text: str) -> None:
    """Write ``text`` to a new 0600 file in ``path``'s folder, flush it to disk, and rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
