"""The composition root: Redis + store + runtime + the Slack app (+ the local workspace when offline).

This is the one place that knows every part; ``bot/`` core, ``handlers/``, ``blocks/`` and
``store/`` only meet here.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

import handlers
import handlers.routes.http
import handlers.routes.results
from blocks.forms import FormUnsupported, check_form_model
from bot.assembly import build_model, load_agent, load_tools, mcp_config, with_agent_tools
from bot.backends import WrappedAgent, wrap
from bot.config import ConfigError, Settings
from bot.engine.installed import Installed
from bot.engine.native_loop import native_on_registry
from bot.engine.parts import UNHURRIED_S
from bot.engine.result_tokens import TOKEN_TTL_S, TokenHolders, token_key
from bot.engine.roles import NoModel, Wakeups, WebRuntime
from bot.engine.tool_registry import ToolRegistry
from bot.engine.turns import Runtime, RuntimeSettings
from bot.models.base import ChatModel
from bot.models.demo_http import BASE_PATH as DEMO_BASE_PATH
from bot.ops import tracing
from bot.ops.background import Background
from bot.ops.logs import EffectiveLevel
from bot.ops.metrics import AppMetrics, MeteredModel, StoreGauges
from bot.ops.observed import ObservedChannel
from bot.ports import Channel
from bot.tools import Tool
from handlers.delivery.channel import SlackChannel
from handlers.delivery.notices import ApproverNotices
from handlers.delivery.pacing import SlackPacing
from handlers.delivery.workspace import SlackWorkspace
from handlers.identity import installation_team
from handlers.metering import MeteredApp, SlackApiMeter
from handlers.routes.http import ClientLimits
from handlers.shared.deps import SlackDeps
from store.assistant_threads import AssistantThreads
from store.audit import AuditLog
from store.audit_events import PassAudit
from store.client import RedisHandle, open_redis, ping
from store.gauges import GaugeReader
from store.home_views import HomeViews
from store.install_marks import InstallMarks
from store.outbox import RedisOutbox
from store.policies import PolicyStore
from store.schedules import ScheduleStore
from store.slack_events import SlackEvents
from store.token_revocations import TokenRevocations
from store.turns import RedisTurns
from store.wakeups import WakeQueue

if TYPE_CHECKING:
    from handlers.shared.governance import SlackPolicySource

log = logging.getLogger(__name__)

RECOVERY_INTERVAL_SECONDS = 2.0  # dead workers' turns and undelivered events are picked up this often
START_SWEEP_WAIT_SECONDS = 5.0  # start-up waits this long at most for its first sweep (it never waits on a tool)
SHUTDOWN_GRACE_SECONDS = 5.0  # in-flight requests get this long; parked turns need nothing at all
# a delivery's Slack call gives up after this (slack_sdk's default is 30 s); handlers.delivery.channel waits this
# long (plus a margin, CLAIM_IN_FLIGHT_S) before it treats an unrecorded post as never made
DELIVERY_TIMEOUT_S = 10


def slack_retry_handlers(*, wait_on_rate_limits: bool = True) -> list[Any]:
    """Brief server and connection errors are retried; 429s wait for Retry-After inside the call, except
    for the outbox's deliveries: those raise, and the outbox offers the event again when Slack said to
    (waiting inside the call would hold the session's delivery lock past its lease)."""
    handlers: list[Any] = [
        SlackApiMeter(),  # first: it counts every attempt (429s retried here included) and never retries
        AsyncServerErrorRetryHandler(max_retry_count=2),
        AsyncConnectionErrorRetryHandler(max_retry_count=2),
    ]
    if wait_on_rate_limits:
        handlers.insert(1, AsyncRateLimitErrorRetryHandler(max_retry_count=3))
    return handlers


def metered(model: ChatModel) -> ChatModel:
    """The model, timed and its tokens counted (once, also when a test hands a running bot's model on)."""
    return model if isinstance(model, MeteredModel) else MeteredModel(model)


def _local_names(local: Any) -> Callable[[str], str | None] | None:
    """Names of the local workspace's people and channels, for the lines ``make run`` prints."""
    if local is None:
        return None

    def name(some_id: str) -> str | None:
        found = local.ws.users.get(some_id) or local.ws.channels.get(some_id)
        return getattr(found, "name", None)

    return name


def _workspace_recorder(installations: Any) -> Any:
    """A Bolt middleware noting, once per process and workspace, which org a workspace belongs to and
    whether the app is installed org-wide, from the verified request (see ``client_for``)."""
    seen: set[tuple[str, str | None, bool]] = set()

    async def remember_workspace(body: dict[str, Any], context: Any, next: Any) -> None:  # noqa: A002
        # the workspace as our sessions name it (an org-wide install's authorization has no team)
        key = (installation_team(body), context.enterprise_id, bool(context.is_enterprise_install))
        if key[0] and key not in seen:
            await installations.async_remember_workspace(*key)
            seen.add(key)
        await next()

    return remember_workspace


class ModelOnFirstUse:
    """The configured model client, built when a turn first asks it (to start fast): a
    restarted process serves the first click, settles it and runs its tool without importing or building the
    model's client (when that client was httpx, its import and TLS context were about a tenth of the start)."""

    def __init__(self, settings: Settings):
        self._settings = settings
        self._model: ChatModel | None = None
        self.name = settings.model if settings.openai_api_key else "demo"

    def built(self) -> ChatModel:
        if self._model is None:
            self._model = build_model(self._settings)
        return self._model

    async def complete(self, messages: Any, tools: Any, *, on_text: Any = None) -> Any:
        return await self.built().complete(messages, tools, on_text=on_text)

    async def aclose(self) -> None:
        if self._model is not None and hasattr(self._model, "aclose"):
            await self._model.aclose()

    def __getattr__(self, name: str) -> Any:  # what tests look at on the model itself
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.built(), name)


def build_tools(settings: Settings, extra: list[Tool] | None = None) -> ToolRegistry:
    """The tools (``bot.assembly.load_tools``), with what Slack needs of them checked."""
    registry = load_tools(settings, extra)
    for t in registry:
        if t.editable:  # "Edit & approve" shows the arguments as a form: every field must have an input
            try:
                check_form_model(t.input_model)
            except FormUnsupported as exc:
                raise ConfigError(f"tool {t.name}: editable=True, but {exc}") from exc
    return registry


def slack_client(**kwargs: Any) -> AsyncWebClient:
    """A Web API client whose debug lines are written only when they would be logged (``EffectiveLevel``)."""
    return AsyncWebClient(logger=EffectiveLevel("slack_sdk.web.async_client"), **kwargs)  # type: ignore[arg-type]


@dataclass
class BotApp:
    """A running bot: what tests and ``python -m bot run`` hold on to."""

    settings: Settings
    redis: RedisHandle
    store: RedisTurns  # the turns (the runtime's ``store``)
    outbox_store: RedisOutbox  # their delivery: the outbox's passes, the post ledger and the audit riding them
    runtime: Runtime
    slack: AsyncApp
    web: web.Application
    deps: SlackDeps
    localslack: Any = None
    url: str = ""
    metrics: AppMetrics | None = None  # what GET /metrics shows
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    _recovery: asyncio.Task[Any] | None = None
    _wakeups: asyncio.Task[Any] | None = None  # a worker taking hand-overs from web processes (bot.engine.roles)

    async def close(self) -> None:
        """Stop taking requests, let running work finish briefly, then release everything.

        Work still running after the grace period is abandoned safely: its lease lapses and another
        worker continues the turn from its last checkpoint.
        """
        for loop in (self._recovery, self._wakeups):
            if loop is not None:
                loop.cancel()
        try:
            await asyncio.wait_for(self.wait_idle(), SHUTDOWN_GRACE_SECONDS)
        except TimeoutError:
            log.warning("shutting down with work in progress; another worker will continue it")
        # nothing may outlive the Redis and Slack connections closed next: the listeners' tasks, the engine's
        await asyncio.gather(self.deps.tasks.abandon(), self.runtime.abandon())
        await self._stack.aclose()

    async def wait_idle(self) -> None:
        """Wait until the engine and the listeners have no background work left (each may start the
        other's: a listener's note waits on a settle, a delivery refreshes App Home)."""
        while self.deps.tasks.busy() or self.runtime.background.busy():
            await self.deps.tasks.wait_idle()
            await self.runtime.wait_idle()


async def start_bot(
    settings: Settings,
    *,
    model: ChatModel | None = None,
    tools: list[Tool] | None = None,
    host: str | None = None,
    port: int | None = None,
    channel_wrap: Callable[[Channel], Channel] | None = None,
    recovery_interval: float = RECOVERY_INTERVAL_SECONDS,
    limits: ClientLimits | None = None,
    agent: object | None = None,
) -> BotApp:
    """Build everything and serve HTTP; returns once the bot answers on its port. ``limits``: how slowly a
    client may send (tests shorten the bounds); ``agent``: a team's own agent, or ``bot.backends.wrap(…)`` of
    it, in place of BOT_AGENT's (DESIGN §14)."""
    settings.check_slack()
    stack = AsyncExitStack()
    try:
        demo_unreachable = False
        if settings.local_mode and not settings.openai_api_key and (agent is not None or settings.agent):
            # with no key, a framework's OpenAI client talks to the offline demo model this bot serves; its address
            # is made when the agent is imported, before we bind: PORT=0 (the OS's pick) leaves it unknown
            demo_unreachable = not settings.port and "OPENAI_BASE_URL" not in os.environ
            if not demo_unreachable:
                os.environ.setdefault("OPENAI_BASE_URL", f"http://127.0.0.1:{settings.port}{DEMO_BASE_PATH}")
            os.environ.setdefault("OPENAI_API_KEY", "demo")
        wrapped = wrap(agent) if agent is not None else load_agent(settings)
        if demo_unreachable:
            raise ConfigError("PORT=0 with BOT_AGENT and no OPENAI_API_KEY: the agent's client could not find the "
                              "offline demo model; set PORT to a port of its own (or give a model key)")
        return await _start(settings, stack, model, tools, host, port, channel_wrap, recovery_interval,
                            limits or ClientLimits(), wrapped)
    except BaseException:
        await stack.aclose()
        raise


async def _start(
    settings: Settings,
    stack: AsyncExitStack,
    model: ChatModel | None,
    tools: list[Tool] | None,
    host: str | None,
    port: int | None,
    channel_wrap: Callable[[Channel], Channel] | None,
    recovery_interval: float,
    limits: ClientLimits,
    agent: WrappedAgent | None,
) -> BotApp:
    registry = with_agent_tools(build_tools(settings, tools), agent)
    if settings.mcp_config:  # MCP servers' tools join the registry as the servers answer (bot.connections.mcp)
        from bot.connections.mcp import McpServers

        mcp_servers = McpServers(mcp_config(settings.mcp_config), registry)
        stack.push_async_callback(mcp_servers.close)
        # waits for each server's first answer (at most START_WAIT_S); one that is down joins when it answers
        await mcp_servers.start()
    # shared: the CLI (`python -m bot pending`, `check`, `audit`) beside this bot joins its embedded server
    redis = await open_redis(settings.redis_url, cluster=settings.redis_cluster,
                             data_dir=Path(settings.data_dir) / "redis", share=True)
    stack.push_async_callback(redis.close)
    if not await ping(redis.client):
        raise ConfigError(f"REDIS_URL: no Redis answered at {_redacted(redis.url)}")
    # one audit log per process: its appends (a delivery pass's, a feedback's, an approver-list edit's) share
    # what it knows of each workspace's chain head, and its per-workspace locks
    audit = AuditLog(redis.client)
    lease_ms, retention_s = int(settings.lease_seconds * 1000), int(settings.retention_days * 86400)
    turns = RedisTurns(redis.client, lease_ms=lease_ms, retention_s=retention_s)
    # the audit log rides each delivery pass's round trips (store/audit_events.py)
    outbox_store = RedisOutbox(redis.client, lease_ms=lease_ms, retention_s=retention_s, audit=PassAudit(audit))

    local = None
    api_url, token, secret = settings.slack_api_url, settings.slack_bot_token, settings.slack_signing_secret
    if settings.local_mode:
        from localslack.seed import BOT_TOKEN
        from localslack.server import LocalSlack

        secret = secret or secrets.token_hex(16)
        # the workspace is kept under BOT_DATA_DIR, so a restart shows the threads parked turns resume in
        local = LocalSlack(bot_url=None, signing_secret=secret, port=settings.localslack_port,
                           data_dir=settings.data_dir)
        stack.push_async_callback(local.stop)  # also after a failed start: its delivery session is open
        await _listen(local.start(), "LOCALSLACK_PORT", settings.localslack_port, local.host)
        api_url, token = local.api_url, BOT_TOKEN

    # one connection pool for every Slack call (without it slack_sdk opens a session per call)
    if tracing.setup(settings.otel_endpoint):  # OTEL_EXPORTER_OTLP_ENDPOINT: traces, Slack calls included
        stack.push_async_callback(asyncio.to_thread, tracing.shutdown)
    slack_spans = tracing.slack_trace_config()
    http = aiohttp.ClientSession(trace_configs=[slack_spans] if slack_spans else None)
    stack.push_async_callback(http.close)
    client = slack_client(token=token, base_url=api_url, session=http, retry_handlers=slack_retry_handlers())
    installed = Installed(InstallMarks(redis.client, client_id=settings.slack_client_id))
    oauth = None
    if settings.slack_client_id:
        from handlers.routes.oauth import STATE_SECONDS, oauth_settings, rotating_installations
        from store.installations import RedisOAuthStateStore

        def app_clock() -> float:  # the runtime's clock (built below; tests move it), read when a token is due
            return runtime.settings.clock()

        installations = rotating_installations(settings, redis.client, slack_client(base_url=api_url, session=http),
                                               app_clock)
        # states are signed with the client secret (oauth_settings says which setting is missing first)
        states = partial(RedisOAuthStateStore, redis.client, expiration_seconds=STATE_SECONDS,
                         secret=settings.slack_client_secret or "")
        oauth = oauth_settings(settings, installations, states, installed)
        client = slack_client(base_url=api_url, session=http, retry_handlers=slack_retry_handlers())
    slack = MeteredApp(  # AsyncApp, timing each ack (hitl_slack_ack_seconds)
        # named: without a name Bolt names the app after its caller's file with inspect.stack(), which reads
        # the source of every frame (30-70 ms of each start)
        name="slack-hitl-bot",
        client=client,
        signing_secret=secret,
        oauth_settings=oauth,
        # a listener's ack goes out when it returns: listeners record what must not be lost, ack,
        # and hand slow work to their own tasks (deps.tasks) — so an acknowledged message is always in Redis
        process_before_response=True,
        # handlers.routes.http checks every signature on the raw bytes before anything is parsed
        request_verification_enabled=False,
        # a request no listener matches goes to handlers.fallback.on_error: answered 200, logged without content
        raise_error_for_unhandled_request=True,
    )

    delivery_client = slack_client(token=client.token, base_url=api_url, timeout=DELIVERY_TIMEOUT_S,
                                     session=http, retry_handlers=slack_retry_handlers(wait_on_rate_limits=False))

    async def client_for(team_id: str | None, *, delivery: bool = False) -> AsyncWebClient:
        if oauth is None:
            return delivery_client if delivery else client
        # found as Bolt's authorize finds it: the workspace's own install or its org's org-wide one
        bot = await oauth.installation_store.async_find_bot_for_workspace(team_id)
        if bot is None:
            raise LookupError(f"no installation for workspace {team_id}")
        return slack_client(token=bot.bot_token, base_url=api_url, session=http,
                              **({"timeout": DELIVERY_TIMEOUT_S} if delivery else {}),
                              retry_handlers=slack_retry_handlers(wait_on_rate_limits=not delivery))

    if oauth is not None:
        slack.middleware(_workspace_recorder(oauth.installation_store))

    async def delivery_client_for(team_id: str | None) -> AsyncWebClient:
        return await client_for(team_id, delivery=True)

    # Slack is a consumer of the committed events (its own cursor), so a slow Slack never holds up the turn
    slack_channel = SlackChannel(outbox_store, delivery_client_for, SlackPacing(settings.slack_pacing), states=turns,
                                 delay_scale=settings.delay_scale)
    stack.push_async_callback(slack_channel.close)  # its pending status lines and streams
    channel: Channel = slack_channel
    if channel_wrap is not None:
        channel = channel_wrap(channel)
    schedules = ScheduleStore(redis.client)
    role = settings.role
    # a web process drives no turn: it hands sessions to workers (bot.engine.roles) and never builds a model client
    runtime_class: Any = Runtime
    handover: dict[str, Any] = {}
    if model is None:  # built here, so its HTTP session is closed here; a model handed in is its owner's to close
        model = ModelOnFirstUse(settings)
        stack.push_async_callback(model.aclose)
    if role == "web":
        runtime_class, handover, model = WebRuntime, {"wakeups": WakeQueue(redis.client)}, NoModel()
    # built before the runtime, which hands it to every policy (ctx.policies); Governance reads it too
    policies = _policy_source(settings, PolicyStore(redis.client, audit), client_for,
                              oauth.installation_store if oauth else None)
    runtime_settings = RuntimeSettings(step_budget=settings.step_budget, token_budget=settings.token_budget,
                                       history_window=settings.history_window, history_limit=settings.history_limit,
                                       max_active_turns=settings.max_active_turns,
                                       unhurried_seconds=UNHURRIED_S * settings.delay_scale)
    model = metered(model)
    if agent is None and settings.loop == "native":  # the bot's own loop through the backend interface
        agent = native_on_registry(model, registry, runtime_settings)
    runtime = runtime_class(
        **handover,
        store=turns,
        outbox_store=outbox_store,
        model=model,
        tools=registry,
        channel=channel,
        settings=runtime_settings,
        workspace=SlackWorkspace(client_for),  # ctx.workspace: tools post in their session's workspace
        schedules=schedules,  # /agent schedule
        live=slack_channel.live,  # answers stream into Slack as the model writes them
        policies=policies,
        installed=installed,
        agent=agent.backend if agent is not None and role != "web" else None,
    )
    if settings.schedules_config:
        await _apply_schedules_file(settings.schedules_config, schedules, runtime.settings.clock())
    runtime.add_consumer("notify", ApproverNotices(outbox_store, delivery_client_for, slack_channel.pacing))
    # handlers get built stores, never a Redis client
    deps = SlackDeps(runtime=runtime, store=turns, posts=outbox_store.posts, settings=settings, audit=audit,
                     assistant_threads=AssistantThreads(redis.client, retention_s=retention_s), policies=policies,
                     result_key=token_key(secret), public_url=settings.public_url,
                     token_holders=TokenHolders(policies, lambda: runtime.settings.clock()),
                     token_revocations=TokenRevocations(redis.client, keep_s=TOKEN_TTL_S),
                     events=SlackEvents(redis.client), tasks=Background())
    _wire_governance(deps, policies, redis, client_for, registry)
    # a line per turn event, delivery lag and ids in logs, around everything the frontend shows
    runtime.channel = ObservedChannel(runtime.channel, names=_local_names(local))
    takes_requests = role != "worker"  # a worker serves no Slack route: health and metrics only
    if takes_requests:
        handlers.register(slack, deps)

    app_metrics = AppMetrics(StoreGauges(GaugeReader(redis.client)))
    web_app = handlers.routes.http.web_app(slack if takes_requests else None, signing_secret=secret,
                                    ready=lambda: ping(redis.client), metrics=app_metrics.exposition,
                                    limits=limits)
    if takes_requests:
        handlers.routes.results.add_routes(web_app, deps, deps.result_key)
    if settings.local_mode and not settings.openai_api_key:  # a framework agent's offline model (BOT_AGENT)
        from handlers.routes import demo_model  # here: only a local bot without a key serves it

        demo_model.add_routes(web_app)
    runner = web.AppRunner(web_app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_SECONDS,
                           **limits.server_args())
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    if host is None:
        # the local workspace is for one person on one machine: keep it off the network
        host = "127.0.0.1" if settings.local_mode and "HOST" not in os.environ else settings.host
    port = settings.port if port is None else port
    site = web.TCPSite(runner, host, port)
    await _listen(site.start(), "PORT", port, host)
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{bound}"
    deps.public_url = deps.public_url or url
    if local is not None:
        local.set_bot_url(f"{url}/slack/events")

    bot = BotApp(settings=settings, redis=redis, store=turns, outbox_store=outbox_store, runtime=runtime,
                 slack=slack, web=web_app, deps=deps, localslack=local, url=url, metrics=app_metrics, _stack=stack)
    if role == "web":
        return bot  # workers sweep, fire timers and deliver
    if role == "worker":
        bot._wakeups = asyncio.create_task(Wakeups(runtime, WakeQueue(redis.client)).serve())
    if recovery_interval > 0:
        bot._recovery = asyncio.create_task(_recovery_loop(runtime, recovery_interval))
    # the first sweep: the turns it finds go on in the background (``Runtime.recover``), and a slow Slack or
    # Redis does not keep the bot from answering either; what it has not done by then it finishes on its own
    first = runtime.spawn(runtime.recover(), what="the start-up sweep")
    await asyncio.wait({first}, timeout=START_SWEEP_WAIT_SECONDS)
    return bot


def _policy_source(settings: Settings, policies: PolicyStore, client_for: Any,
                   workspaces: Any = None) -> SlackPolicySource | None:
    """The approver lists, workspace rules and admins the policies read, when that part is installed (None:
    those rules fail closed): the stored ones, with Slack's word on admins and outsiders."""
    try:
        from handlers.shared.admins import AdminCheck
        from handlers.shared.governance import SlackPolicySource
    except ImportError:
        return None
    return SlackPolicySource(policies, AdminCheck(client_for, settings.admins), workspaces)


def _wire_governance(deps: SlackDeps, source: SlackPolicySource | None, redis: RedisHandle, client_for: Any,
                     registry: ToolRegistry) -> None:
    """App Home, /approvers, approver lists and the audit log, over the policy source the runtime was given."""
    if source is None:  # that part is not installed
        return
    from handlers.delivery.home import HomeRefresh
    from handlers.shared.governance import Governance
    deps.governance = Governance.create(deps, source, HomeViews(redis.client), client_for, registry)
    if deps.settings.local_mode:  # the local workspace's finance approver (bob) approves the demo's refunds
        from localslack.seed import BOB, TEAM_ID

        deps.tasks.spawn(deps.governance.seed_demo(TEAM_ID, BOB), what="seed the demo approver list")
    # open App Homes follow requests as they appear and settle: a consumer with its own cursor, so a refresh
    # that fails is retried alone and never makes Slack delivery repeat
    deps.runtime.add_consumer("home", HomeRefresh(deps.governance))


async def _apply_schedules_file(path: str, schedules: ScheduleStore, clock: float) -> None:
    """BOT_SCHEDULES: the file's schedules become the stored file-defined ones (added, changed, removed)."""
    from bot.engine.schedules import ScheduleError, configured_schedule, load_schedules_file

    now = datetime.fromtimestamp(clock, UTC)
    try:
        wanted = [configured_schedule(entry, now) for entry in load_schedules_file(path)]
    except ScheduleError as exc:
        raise ConfigError(str(exc)) from None
    added, removed = await schedules.apply_file(wanted)
    log.info("schedules from %s: %d in the file, %d added or changed, %d removed", path, len(wanted), added, removed)


async def _listen(start: Awaitable[Any], variable: str, port: int, host: str) -> Any:
    """Await a server's ``start()``; a port it cannot bind is a setting to change (ConfigError, exit 2)."""
    try:
        return await start
    except OverflowError:  # asyncio's own check of the range, for a port not read from the environment
        raise ConfigError(f"{variable} {port} is out of range: set {variable} to a port from 1 to 65535") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"{variable} {port} is already in use: set {variable} to a free port") from None
        raise ConfigError(f"{variable} {port}: cannot listen on {host}:{port} ({exc.strerror or exc}): "
                          f"set {variable} (or HOST) to one this machine can use") from None


async def _recovery_loop(runtime: Runtime, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await runtime.recover()
        except Exception:
            log.exception("recovery sweep failed; trying again in %ss", interval)


def _redacted(url: str) -> str:
    if "@" in url and "//" in url:
        scheme, rest = url.split("//", 1)
        return f"{scheme}//***@{rest.split('@', 1)[1]}"
    return url
