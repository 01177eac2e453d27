"""The default workspace: team Acme (local), the bot, five people (one external) and two channels."""

from __future__ import annotations

from pydantic import BaseModel, Field

from localslack.models import USER_COLORS, Channel, Team, User

TEAM_ID = "T0LOCAL"
OTHER_TEAM_ID = "T0OTHER"
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
BOT_TOKEN = "xoxb-local-T0LOCAL"
ALICE, BOB, CAROL, DAVE, ERIN = "U0ALICE", "U0BOB", "U0CAROL", "U0DAVE", "U0EXT"
GENERAL, FINANCE = "C0GENERAL", "C0FINANCE"


class Seed(BaseModel):
    """Everything a workspace starts with. Pass your own to ``LocalSlack(seed=...)`` to replace it."""

    teams: list[Team] = Field(default_factory=list)
    users: list[User] = Field(default_factory=list)
    channels: list[Channel] = Field(default_factory=list)


def default_seed() -> Seed:
    def person(index: int, user_id: str, team: str, name: str, real: str, title: str, **flags: bool) -> User:
        color = USER_COLORS[index % len(USER_COLORS)]
        return User(id=user_id, team_id=team, name=name, real_name=real, title=title, color=color, **flags)

    users = [
        User(
            id=BOT_USER_ID,
            team_id=TEAM_ID,
            name="agent",
            real_name="agent",
            title="AI agent",
            is_bot=True,
            bot_id=BOT_ID,
            color="2eb67d",
        ),
        person(0, ALICE, TEAM_ID, "alice", "Alice Anders", "Support lead"),
        person(1, BOB, TEAM_ID, "bob", "Bob Brown", "Finance approver"),
        person(2, CAROL, TEAM_ID, "carol", "Carol Chen", "Workspace admin", is_admin=True, is_owner=True),
        person(3, DAVE, TEAM_ID, "dave", "Dave Diaz", "Engineer"),
        person(4, ERIN, OTHER_TEAM_ID, "erin", "Erin Evans", "Partner (Other Corp)"),
    ]
    teams = [
        Team(
            id=TEAM_ID,
            name="Acme (local)",
            domain="acme-local",
            bot_user_id=BOT_USER_ID,
            bot_id=BOT_ID,
            bot_token=BOT_TOKEN,
        ),
        Team(id=OTHER_TEAM_ID, name="Other Corp", domain="othercorp"),
    ]
    channels = [
        Channel(
            id=GENERAL,
            team_id=TEAM_ID,
            name="general",
            members=[BOT_USER_ID, ALICE, BOB, CAROL, DAVE, ERIN],
            connected_team_ids=[OTHER_TEAM_ID],
            topic="Company-wide chat. Mention @agent to ask the AI agent.",
            purpose="Everyone, plus our partners at Other Corp (Slack Connect).",
        ),
        Channel(
            id=FINANCE,
            team_id=TEAM_ID,
            name="finance",
            members=[BOT_USER_ID, ALICE, BOB, CAROL],
            topic="Refunds, invoices and approvals.",
            purpose="Finance team.",
        ),
    ]
    return Seed(teams=teams, users=users, channels=channels)
