"""A local Slack workspace: Web API, signed event/interaction delivery and a browser UI (DESIGN §11).

async with LocalSlack(bot_url="http://127.0.0.1:3000/slack/events", signing_secret="s") as slack:
    client = AsyncWebClient(base_url=slack.api_url, token=slack.bot_token)
    ts, deliveries = await slack.post_message(ALICE, GENERAL, f"<@{BOT_USER_ID}> hello")
"""

from localslack.actions import LocalSlackError
from localslack.models import (
    APP_ID,
    ApiCall,
    Channel,
    DeliveryAttempt,
    DeliveryResult,
    Ephemeral,
    Message,
    Reaction,
    Team,
    User,
    View,
)
from localslack.seed import (
    ALICE,
    BOB,
    BOT_ID,
    BOT_TOKEN,
    BOT_USER_ID,
    CAROL,
    DAVE,
    ERIN,
    FINANCE,
    GENERAL,
    OTHER_TEAM_ID,
    TEAM_ID,
    Seed,
    default_seed,
)
from localslack.server import LocalSlack

__all__ = [
    "ALICE",
    "APP_ID",
    "BOB",
    "BOT_ID",
    "BOT_TOKEN",
    "BOT_USER_ID",
    "CAROL",
    "DAVE",
    "ERIN",
    "FINANCE",
    "GENERAL",
    "OTHER_TEAM_ID",
    "TEAM_ID",
    "ApiCall",
    "Channel",
    "DeliveryAttempt",
    "DeliveryResult",
    "Ephemeral",
    "LocalSlack",
    "LocalSlackError",
    "Message",
    "Reaction",
    "Seed",
    "Team",
    "User",
    "View",
    "default_seed",
]
