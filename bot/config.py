"""Settings from the environment and an optional ``.env`` file (DESIGN §3). Names are a contract."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_TOOLS = "bot.demo_tools"


class ConfigError(Exception):
    """A setting is missing or wrong; the message names the variable and the fix."""


# The bot token's scopes, asked for at install; manifest.yml lists the same (tests/test_manifest.py)
BOT_SCOPES = (
    "app_mentions:read",  # app_mention events
    "channels:history",  # threads in public channels the agent is part of
    "groups:history",  # the same in private channels
    "im:history",  # direct messages
    "mpim:history",  # threads in group DMs
    "chat:write",  # replies, cards, card updates, private notes
    "commands",  # /approvers
    "users:read",  # users.info: who is a workspace admin
    "im:write",  # conversations.open: private notes for App Home clicks
    "assistant:write",  # the AI split view: its suggested prompts and thread titles
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    slack_bot_token: str | None = Field(default=None, alias="SLACK_BOT_TOKEN")
    slack_signing_secret: str | None = Field(default=None, alias="SLACK_SIGNING_SECRET")
    slack_app_token: str | None = Field(default=None, alias="SLACK_APP_TOKEN")
    slack_api_url: str = Field(default="https://slack.com/api/", alias="SLACK_API_URL")
    slack_client_id: str | None = Field(default=None, alias="SLACK_CLIENT_ID")
    slack_client_secret: str | None = Field(default=None, alias="SLACK_CLIENT_SECRET")
    slack_scopes: str = Field(default=",".join(BOT_SCOPES), alias="SLACK_SCOPES")
    port: int = Field(default=3000, alias="PORT")
    host: str = Field(default="0.0.0.0", alias="HOST")
    redis_url: str | None = Field(default=None, alias="REDIS_URL")
    redis_cluster: bool = Field(default=False, alias="REDIS_CLUSTER")
    data_dir: str = Field(default=".data", alias="BOT_DATA_DIR")
    openai_base_url: str = Field(default="https://api.openai.com/v1", alias="OPENAI_BASE_URL")
    openai_api_key: str | None = Field(default=None, alias="OPENAI_API_KEY")
    model: str = Field(default="gpt-4o-mini", alias="MODEL")
    bot_tools: str = Field(default=DEFAULT_TOOLS, alias="BOT_TOOLS")
    # module:attribute of a team's own agent (pydantic-ai, OpenAI Agents SDK, LangGraph), or of
    # ``bot.backends.wrap(agent, policies=…)``: it drives the turns in place of the built-in loop (bot.backends)
    agent: str | None = Field(default=None, alias="BOT_AGENT")
    # the bot's own loop when no BOT_AGENT is given: "native" (its model and tools driven through the agent-backend
    # interface, as a framework's are: bot.engine.native_loop) or "builtin" (the engine's own step: bot.engine.drive)
    loop: Literal["builtin", "native"] = Field(default="native", alias="BOT_LOOP")
    bot_admins: str = Field(default="", alias="BOT_ADMINS")
    step_budget: int = Field(default=20, alias="BOT_STEP_BUDGET", ge=1)
    token_budget: int = Field(default=200_000, alias="BOT_TOKEN_BUDGET", ge=1000)
    history_window: int = Field(default=200, alias="BOT_HISTORY_WINDOW", ge=0)
    lease_seconds: float = Field(default=15.0, alias="BOT_LEASE_SECONDS", gt=0.2)
    # how long a step runs before the bot shows its progress (a status line after 1.5 s, a stream after 1 s,
    # its start written alone after 0.5 s: RuntimeSettings.unhurried_seconds), times this. Under Valgrind or a
    # profiler everything runs many times slower: the bench stretches them alike. Longer also means fewer
    # writes and Slack calls for a quick step under load, and a slow step's progress shown later
    delay_scale: float = Field(default=1.0, alias="BOT_DELAY_SCALE", gt=0)
    retention_days: float = Field(default=30.0, alias="BOT_RETENTION_DAYS", gt=0)
    history_limit: int = Field(default=1000, alias="BOT_HISTORY_LIMIT", ge=0)
    max_active_turns: int = Field(default=8, alias="BOT_MAX_ACTIVE_TURNS", ge=1)
    localslack_port: int = Field(default=3001, alias="LOCALSLACK_PORT")
    public_url: str = Field(default="", alias="BOT_PUBLIC_URL")  # e.g. https://bot.example.com (result API links)
    openapi_config: str | None = Field(default=None, alias="BOT_OPENAPI")  # OpenAPI connections (bot.connections.openapi)
    mcp_config: str | None = Field(default=None, alias="BOT_MCP_CONFIG")  # MCP servers (bot.connections.mcp)
    schedules_config: str | None = Field(default=None, alias="BOT_SCHEDULES")  # schedules file (bot.engine.schedules)
    log_format: Literal["text", "json"] = Field(default="text", alias="LOG_FORMAT")  # bot.ops.logs
    log_content: bool = Field(default=False, alias="LOG_CONTENT")  # message text in logs (off: lengths only)
    otel_endpoint: str | None = Field(default=None, alias="OTEL_EXPORTER_OTLP_ENDPOINT")  # traces (bot.ops.tracing)
    # slack: keep inside Slack's per-method tiers (handlers/delivery/pacing.py); off: no waiting of our own, only a
    # 429's Retry-After (apps with raised limits, benchmarks)
    slack_pacing: Literal["slack", "off"] = Field(default="slack", alias="SLACK_PACING")
    # web: receive Slack's requests, record, settle, ack; worker: drive turns, run tools, deliver to Slack,
    # fire timers; all: both in one process (bot.engine.roles)
    role: Literal["web", "worker", "all"] = Field(default="all", alias="BOT_ROLE")

    @field_validator("port", "localslack_port")
    @classmethod
    def a_port(cls, value: int) -> int:
        if not 0 <= value <= 65535:
            raise ValueError(f"{value} is out of range: use a port from 1 to 65535 (0 picks a free one)")
        return value

    @field_validator("log_format", mode="before")
    @classmethod
    def a_log_format(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in ("text", "json"):
            return value.strip().lower()
        raise ValueError(f"{value!r} is not a log format: use text (the default) or json")

    @field_validator("slack_pacing", mode="before")
    @classmethod
    def a_pacing(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in ("slack", "off"):
            return value.strip().lower()
        raise ValueError(f"{value!r} is not a pacing: use slack (the default: Slack's rate limits) or off")

    @field_validator("loop", mode="before")
    @classmethod
    def a_loop(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in ("builtin", "native"):
            return value.strip().lower()
        raise ValueError(f"{value!r} is not a loop: use native (the default) or builtin")

    @field_validator("role", mode="before")
    @classmethod
    def a_role(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in ("web", "worker", "all"):
            return value.strip().lower()
        raise ValueError(f"{value!r} is not a role: use all (the default), web or worker")

    @field_validator("slack_api_url")
    @classmethod
    def trailing_slash(cls, value: str) -> str:
        return value if value.endswith("/") else value + "/"

    @property
    def admins(self) -> set[str]:
        return {a.strip() for a in self.bot_admins.split(",") if a.strip()}

    @property
    def tool_modules(self) -> list[str]:
        """BOT_TOOLS' modules. Left unset, the demo tools serve the bot's own loop only: with BOT_AGENT the
        agent's tools are the ones its model calls (the demo's ``refund_charge`` would take its tool's name)."""
        if self.agent and "bot_tools" not in self.model_fields_set:
            return []
        return [m.strip() for m in self.bot_tools.split(",") if m.strip()]

    @property
    def local_mode(self) -> bool:
        """No Slack token: run against the local Slack workspace (DESIGN §11)."""
        return not self.slack_bot_token and not self.slack_client_id

    @property
    def socket_mode(self) -> bool:
        return bool(self.slack_app_token)

    def check_slack(self) -> None:
        """Raise ConfigError naming the variable when Slack mode is misconfigured."""
        if self.local_mode:
            if self.role != "all":  # each process would start its own local workspace
                raise ConfigError(f"BOT_ROLE={self.role} needs a Slack both roles reach (SLACK_BOT_TOKEN): "
                                  "the local workspace runs inside one process of role all")
            return
        if self.slack_bot_token and not self.slack_bot_token.startswith("xoxb-"):
            raise ConfigError("SLACK_BOT_TOKEN must be a bot token starting with xoxb-")
        if self.slack_app_token and not self.slack_app_token.startswith("xapp-"):
            raise ConfigError("SLACK_APP_TOKEN must be an app-level token starting with xapp-")
        if not self.socket_mode and not self.slack_signing_secret:
            raise ConfigError("SLACK_SIGNING_SECRET is required in HTTP mode (or set SLACK_APP_TOKEN for Socket Mode)")
        if bool(self.slack_client_id) != bool(self.slack_client_secret):
            raise ConfigError("set both SLACK_CLIENT_ID and SLACK_CLIENT_SECRET for multi-workspace OAuth, or neither")


def load_settings(**overrides: object) -> Settings:
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "configuration"
        # our validators' own words, without pydantic's "Value error, " in front
        message = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]
        raise ConfigError(f"{name}: {message}") from exc
