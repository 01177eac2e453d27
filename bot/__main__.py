"""The command line: ``python -m bot [run|setup|check|pending|chat|audit|reset-local]``."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bot.config import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from bot.approval import PolicySource
    from store.client import RedisHandle
    from store.policies import PolicyStore

log = logging.getLogger("bot")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot", description="An AI agent in Slack that stops and asks people.")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run the bot (default); without SLACK_BOT_TOKEN it starts a local Slack workspace")
    run.add_argument("--role", choices=("all", "web", "worker"), default=None,
                     help="web: take Slack's requests (record, settle, ack); worker: drive turns, run tools, "
                          "deliver to Slack; all: both (default: $BOT_ROLE, else all)")
    _add_setup_parser(sub)
    sub.add_parser("check", help="check the configuration and connections (Redis, Slack, model), then exit")
    pending = sub.add_parser("pending", help="list requests waiting for a person")
    pending.add_argument("--team", default=None, help="only this workspace (default: every workspace)")
    sub.add_parser("chat", help="talk to the agent in this terminal (no Slack needed)")
    sub.add_parser("reset-local", help="forget the local Slack workspace and the embedded Redis's data "
                                       "(BOT_DATA_DIR); stop the bot first")
    audit = sub.add_parser("audit", help="export or verify a workspace's audit log")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True)
    export = audit_sub.add_parser("export", help="write the audit log as JSON lines")
    export.add_argument("--team", required=True)
    export.add_argument("--out", default="-", help="file to write (default: stdout)")
    export.add_argument("--kind", default=None)
    export.add_argument("--actor", default=None)
    export.add_argument("--subject", default=None)
    export.add_argument("--since", default=None, help="ISO-8601 time")
    export.add_argument("--until", default=None, help="ISO-8601 time")
    verify = audit_sub.add_parser("verify", help="check the hash chain; exit 1 if an entry was edited or removed")
    verify.add_argument("--team", default=None)
    verify.add_argument("--file", default=None, help="verify an exported JSONL file instead of Redis")
    verify.add_argument("--head", default=None, help="with --file: the last hash noted when it was exported "
                                                     "(or a later one); the export must reach it")
    args = parser.parse_args(argv)
    if args.command == "setup":  # before the settings: it is what writes them
        from handlers.setup import setup_command

        try:
            return asyncio.run(setup_command(args))
        except KeyboardInterrupt:
            return 130
    from store.embedded import DataDirInUse, EmbeddedServerError, make_private

    try:
        role = getattr(args, "role", None)
        settings = load_settings(**({"BOT_ROLE": role} if role else {}))
        _configure_logging(settings)
        # the folder itself; what the bot keeps in it (Redis's files, the local workspace) is closed by its writer
        make_private(Path(settings.data_dir), recursive=False)
        command = args.command or "run"
        if command == "run":
            return asyncio.run(_run(settings))
        if command == "check":
            return asyncio.run(_check(settings))
        if command == "pending":
            return asyncio.run(_pending(settings, args.team))
        if command == "chat":
            return asyncio.run(_chat(settings))
        if command == "reset-local":
            return _reset_local(settings)
        if command == "audit":
            from store.audit_cli import audit_command

            return asyncio.run(audit_command(settings, args))
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except DataDirInUse as exc:  # a second `run` (or `chat`) on the same BOT_DATA_DIR
        print(exc, file=sys.stderr)
        return 2
    except EmbeddedServerError as exc:
        print(f"embedded Redis: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _add_setup_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`setup`'s flags (its work is in handlers.setup, imported only when it runs: it pulls in Slack's SDK)."""
    import os

    setup = sub.add_parser("setup", help="connect the bot to your Slack workspace: create the app from "
                                         "manifest.yml, check its tokens, write .env")
    setup.add_argument("--bot-token", help="the Bot User OAuth Token (xoxb-…); default: $SLACK_BOT_TOKEN or asked")
    setup.add_argument("--signing-secret", help="the Signing Secret, for HTTP mode; default: $SLACK_SIGNING_SECRET")
    setup.add_argument("--app-token", help="an app-level token (xapp-…) for Socket Mode; default: $SLACK_APP_TOKEN")
    setup.add_argument("--api-url", default=os.environ.get("SLACK_API_URL") or "https://slack.com/api/",
                       help="Slack's Web API (default: $SLACK_API_URL or https://slack.com/api/)")
    setup.add_argument("--env-file", default=".env", help="where to write the settings (default: .env)")
    setup.add_argument("--yes", action="store_true", help="replace values the env file already has without asking")


def _configure_logging(settings: Settings) -> None:
    """LOG_FORMAT and LOG_CONTENT; the configured secrets are never shown, whatever logs them."""
    from bot.ops import logs

    logs.configure(settings.log_format, log_content=settings.log_content)
    logs.add_secrets(settings.slack_bot_token, settings.slack_app_token, settings.slack_signing_secret,
                     settings.slack_client_secret, settings.openai_api_key)


def _reset_local(settings: Settings) -> int:
    """Start the local setup afresh: the local Slack workspace, and the embedded Redis unless REDIS_URL
    names another one (that one is never touched)."""
    from localslack.persistence import reset_command
    from store.embedded import DataDirInUse, forget_data

    if settings.redis_url:
        print("REDIS_URL is set: its data is kept (parked turns there may point at messages the new local "
              "workspace does not have)")
    else:
        redis_dir = Path(settings.data_dir) / "redis"
        try:
            if forget_data(redis_dir):
                print(f"forgot the embedded Redis data ({redis_dir})")
        except DataDirInUse as exc:
            owner = f"pid {exc.pid}" if exc.pid is not None else "another process"
            print(f"the bot is running ({owner}) on {settings.data_dir}: stop it first; nothing was reset",
                  file=sys.stderr)
            return 1
    return reset_command(settings.data_dir)


async def _run(settings: Settings) -> int:
    from bot.app import start_bot
    from bot.ops import logs
    from bot.ops.heap import settle_after_start

    bot = await start_bot(settings)
    settle_after_start()  # this process serves from now on: what it built to start is kept out of GC scans
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, logs.log_waits)  # what every task waits on (OPERATIONS.md)
    # every thread's stack, written from C: it answers even when something blocks the event loop
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    if settings.role == "worker":  # no Slack route: only health and metrics on the port
        log.info("worker running (turns, tools, delivery to Slack; health and metrics at %s)", bot.url)
    elif settings.log_format == "json":  # one JSON object per line, the banner included
        where = f"Local Slack workspace: {bot.localslack.ui_url} " if bot.localslack is not None else ""
        log.info("%s(the bot answers %s)", where,
                 "over Socket Mode" if settings.socket_mode else f"at {bot.url}/slack/events, metrics at /metrics")
    elif bot.localslack is not None:
        print(f"\n  Local Slack workspace: {bot.localslack.ui_url}\n  (the bot answers at {bot.url}/slack/events)\n",
              flush=True)
    else:
        mode = "Socket Mode" if settings.socket_mode else f"HTTP on {bot.url}/slack/events"
        role = "" if settings.role == "all" else f"{settings.role} role, "
        print(f"bot running ({role}{mode}; metrics at {bot.url}/metrics)", flush=True)
    socket = None
    if settings.socket_mode and settings.role != "worker":  # a worker takes no Slack requests
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        socket = AsyncSocketModeHandler(bot.slack, settings.slack_app_token)
        await socket.connect_async()
    await stop.wait()
    if socket is not None:
        await socket.close_async()
    await bot.close()
    return 0


async def _check(settings: Settings) -> int:
    from bot.app import build_tools
    from handlers.setup import SetupFailed, check_bot_token
    from store.client import open_redis, ping

    settings.check_slack()
    ok = True
    tools = build_tools(settings)
    print(f"tools: {', '.join(tools.names())}")
    if settings.mcp_config:
        ok &= await _check_mcp(settings.mcp_config, tools)
    handle = await open_redis(settings.redis_url, cluster=settings.redis_cluster,
                              data_dir=Path(settings.data_dir) / "redis", join=True)
    try:
        up = await ping(handle.client)
        print(f"redis: {'ok' if up else 'NOT reachable'} ({_redis_source(settings, handle)})")
        ok &= up
        if up:
            for hint in await memory_hints(handle.client):
                print(f"redis: note: {hint}")
            for line in await data_report(handle.client, retention_days=settings.retention_days):
                print(f"data: {line}")
    finally:
        await handle.close()
    if settings.local_mode:
        print("slack: no SLACK_BOT_TOKEN — `run` starts the local Slack workspace")
    elif settings.slack_bot_token:
        try:  # the same check as setup's, with its words: what is wrong and where it is fixed
            await check_bot_token(settings.slack_bot_token, settings.slack_api_url)
        except SetupFailed as exc:
            print(f"slack: NOT ok — {exc}")
            ok = False
    if settings.openai_api_key:
        ok &= await _check_model(settings)
    else:
        print("model: offline demo model (set OPENAI_API_KEY for a real one)")
    return 0 if ok else 1


async def _check_model(settings: Settings) -> bool:
    """Ask the endpoint itself: its model list (GET /models), or, where it has none, one token of chat."""
    import httpx

    from bot.models.openai import _without_credentials

    base, where, model = settings.openai_base_url.rstrip("/"), _without_credentials(settings.openai_base_url), settings.model
    headers = {"Authorization": f"Bearer {settings.openai_api_key}"}
    listed, owned_by = True, None
    try:
        async with httpx.AsyncClient(timeout=15) as client:
            resp = await client.get(f"{base}/models", headers=headers)
            if resp.status_code in (404, 405):  # some compatible servers list nothing: try the model itself
                listed = False
                resp = await client.post(f"{base}/chat/completions", headers=headers, json={
                    "model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1})
    except httpx.HTTPError as exc:
        print(f"model: NOT reachable at {where} ({type(exc).__name__}) — check OPENAI_BASE_URL and that the "
              "endpoint is up")
        return False
    if resp.status_code in (401, 403):
        print(f"model: refused ({resp.status_code}) at {where} — check OPENAI_API_KEY")
        return False
    if resp.status_code == 404 and not listed:
        print(f"model: {model} is unknown at {where} — check MODEL")
        return False
    if not resp.is_success:
        print(f"model: {where} answered {resp.status_code} — check OPENAI_BASE_URL (an OpenAI-compatible /v1 URL)")
        return False
    if listed:
        try:
            offered = [str(m["id"]) for m in resp.json()["data"]]
        except (ValueError, KeyError, TypeError):
            print(f"model: {where}/models is not an OpenAI model list — check OPENAI_BASE_URL")
            return False
        if model not in offered:
            print(f"model: {model} is unknown at {where} — check MODEL (offered: {', '.join(offered[:8]) or 'none'})")
            return False
        owned_by = next((str(m.get("owned_by")) for m in resp.json()["data"] if m.get("id") == model), None)
    print(f"model: ok, {model} at {where}")
    return await _check_answer(settings, owned_by)


async def _check_answer(settings: Settings, owned_by: str | None) -> bool:
    """One short answer through the bot's own client: the provider kind, and any fallback the endpoint made it take."""
    from bot.models.base import ModelError
    from bot.models.openai import OpenAIChatModel
    from bot.models.providers import provider_kind
    from bot.models.words import failure_words

    print(f"model: provider: {provider_kind(settings.openai_base_url, owned_by)}")
    async with OpenAIChatModel(settings.model, base_url=settings.openai_base_url, api_key=settings.openai_api_key,
                               timeout=30, max_retries=0) as client:
        try:
            await client.complete([{"role": "user", "content": "Reply with the word OK."}], [])
        except ModelError as exc:
            print(f"model: a test answer failed: {failure_words(exc)} ({exc.reason})")
            return False
        for fallback in client.fallbacks or ["none"]:
            print(f"model: fallback in force: {fallback}")
    return True


async def _check_mcp(path: str, tools: object) -> bool:
    """Connect to each server of BOT_MCP_CONFIG as `run` would, and say what it offers or why not."""
    from bot.connections.mcp import McpServers, load_config
    from bot.ops import logs

    servers = McpServers(load_config(path), tools)  # type: ignore[arg-type]
    try:
        await servers.start()
        for name, server in servers.servers.items():
            if server.connected:
                print(f"mcp: {name}: ok, {len(server.tools)} tools ({', '.join(server.tools) or 'none'})")
            else:
                # printed, not logged: redacted here as the log format would (a server may quote a secret)
                print(logs.redact(f"mcp: {name}: NOT connected ({server.last_problem or 'no answer in time'})"))
        return all(server.connected for server in servers.servers.values())
    finally:
        await servers.close()


def _redis_source(settings: Settings, handle: RedisHandle) -> str:
    if settings.redis_url:
        return "REDIS_URL"
    if handle.owner_pid is not None:
        return f"embedded, the running bot's (pid {handle.owner_pid})"
    return "embedded"


async def data_report(client: object, *, retention_days: float) -> list[str]:
    """How much the bot keeps, and how old its oldest data is (retention: BOT_RETENTION_DAYS)."""
    from store.turns import RedisTurns

    store = RedisTurns(client)  # type: ignore[arg-type]
    counts = await store.key_counts()
    lines = [", ".join(f"{n} {kind}" for kind, n in counts.items()) or "no keys yet",
             f"retention: {retention_days:g} days after the last write (settled requests, finished sessions)"]
    oldest = await store.oldest_pending()
    if oldest is not None:
        lines.append(f"oldest open request: {oldest:%Y-%m-%d %H:%M} UTC (open requests never expire)")
    return lines


MEMORY_SETTINGS = {"stream-node-max-bytes": 2048, "hash-max-listpack-value": 4096}


async def memory_hints(client: object) -> list[str]:
    """Settings that make each parked turn cost about a third more memory (docs/PERFORMANCE.md)."""
    hints = []
    for name, wanted in MEMORY_SETTINGS.items():
        try:
            found = await client.config_get(name)  # type: ignore[attr-defined]
            value = int(found.get(name, found.get(name.encode(), 0)))
        except Exception:  # noqa: BLE001 - managed Redis often forbids CONFIG; nothing to advise then
            return []
        if (name == "stream-node-max-bytes" and (value == 0 or value > wanted)) or (
            name == "hash-max-listpack-value" and value < wanted
        ):
            hints.append(f"{name} is {value}; {wanted} keeps parked turns smaller (see docs/PERFORMANCE.md)")
    return hints


async def _pending(settings: Settings, team: str | None) -> int:
    from store.client import open_redis
    from store.turns import RedisTurns

    handle = await open_redis(settings.redis_url, cluster=settings.redis_cluster,
                              data_dir=Path(settings.data_dir) / "redis", join=True)
    try:
        store = RedisTurns(handle.client)
        teams = [team] if team else await store.teams_with_pending()
        records = [r for t in teams for r in await store.pending_for_team(t)]
        if not records:
            print("nothing is waiting")
        for r in records:
            who = r.request.principal.principal_id if r.request.principal else "anonymous"
            what = r.request.action.tool_name if r.request.action else r.request.prompt
            print(f"{r.request_id}  {r.team_id or '-':<10} {r.request.kind:<14} {what:<24} asked by {who}  "
                  f"at {r.request.created_at:%Y-%m-%d %H:%M}")
    finally:
        await handle.close()
    return 0


async def _chat(settings: Settings) -> int:
    from bot.assembly import build_model, load_agent, load_tools, with_agent_tools
    from bot.console import ConsoleChannel, ConsoleWorkspace, cancel_leftovers, chat_loop, new_console_session
    from bot.engine.native_loop import native_on_registry
    from bot.engine.turns import Runtime, RuntimeSettings
    from bot.principals import CONSOLE_TEAM
    from store.audit import AuditLog
    from store.client import open_redis
    from store.outbox import RedisOutbox
    from store.policies import PolicyStore
    from store.turns import RedisTurns

    handle = await open_redis(settings.redis_url, cluster=settings.redis_cluster,
                              data_dir=Path(settings.data_dir) / "redis")
    try:
        store = RedisTurns(handle.client)
        agent = load_agent(settings)  # BOT_AGENT, as `run` has it
        tools = with_agent_tools(load_tools(settings), agent)
        policies = await _use_policies(PolicyStore(handle.client, AuditLog(handle.client)),
                                       seed_refunds=tools.get("refund_charge") is not None)
        model = build_model(settings)
        runtime_settings = RuntimeSettings(step_budget=settings.step_budget, token_budget=settings.token_budget,
                                           history_window=settings.history_window,
                                           history_limit=settings.history_limit)
        if agent is None and settings.loop == "native":  # BOT_LOOP, as `run` has it
            agent = native_on_registry(model, tools, runtime_settings)
        runtime = Runtime(store=store, outbox_store=RedisOutbox(handle.client), model=model, tools=tools,
                          channel=ConsoleChannel(), workspace=ConsoleWorkspace(), policies=policies,
                          settings=runtime_settings, agent=agent.backend if agent is not None else None)
        await cancel_leftovers(runtime, {r.session_id for r in await store.pending_for_team(CONSOLE_TEAM)})
        await chat_loop(runtime, new_console_session())
    finally:
        await handle.close()
    return 0


async def _use_policies(store: PolicyStore, *, seed_refunds: bool) -> PolicySource:
    """Approver lists for the console's workspace; like the local Slack demo, "bob" approves refunds
    until the console workspace's lists are edited."""
    from bot.engine.policy_source import StorePolicySource
    from bot.principals import CONSOLE_TEAM

    policy = await store.get(CONSOLE_TEAM)
    if seed_refunds and policy.version == 0 and not policy.tools:
        await store.set_approvers(CONSOLE_TEAM, "tool:refund_charge", ["bob"], actor="bot:console")
    return StorePolicySource(store)


if __name__ == "__main__":
    sys.exit(main())
