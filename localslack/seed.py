"""The default workspace: team Acme (local), the bot, five people (one external) and two channels.

``grid_seed()`` is the opt-in alternative: an Enterprise Grid org with two workspaces, installed org-wide
(one bot, one token) or per workspace — ``LocalSlack(seed=grid_seed())``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from localslack.models import USER_COLORS, Channel, Enterprise, Team, User

TEAM_ID = "T0LOCAL"
OTHER_TEAM_ID = "T0OTHER"
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
BOT_TOKEN = "xoxb-local-T0LOCAL"
ALICE, BOB, CAROL, DAVE, ERIN = "U0ALICE", "U0BOB", "U0CAROL", "U0DAVE", "U0EXT"
GENERAL, FINANCE = "C0GENERAL", "C0FINANCE"


# The Enterprise Grid org of grid_seed(): Grid user ids are global and start with W.
ENTERPRISE_ID = "E0GRID"
GRID_SALES, GRID_SUPPORT = "T0SALES", "T0SUPPORT"
GRID_BOT_USER_ID, GRID_BOT_ID, GRID_BOT_TOKEN = "W0GRIDBOT", "B0GRIDBOT", "xoxb-local-E0GRID"
ANA, BEN, CHI, DEV = "W0ANA", "W0BEN", "W0CHI", "W0DEV"
SALES_CHANNEL, SUPPORT_CHANNEL = "C0SALES", "C0SUPPORT"


class Seed(BaseModel):
    """Everything a workspace starts with. Pass your own to ``LocalSlack(seed=...)`` to replace it."""

    enterprises: list[Enterprise] = Field(default_factory=list)
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


def grid_seed(*, org_wide: bool = True) -> Seed:
    """An Enterprise Grid org "Globex" (``E0GRID``) with two workspaces, Sales and Support.

    - ana (org admin, Sales) and ben (Sales); chi (Support, workspace admin); dev belongs to both.
    - #sales in Sales, #support in Support; the bot is in both.
    - ``org_wide=True``: the app is installed on the whole org — one bot user ``W0GRIDBOT`` and one token
      ``xoxb-local-E0GRID`` for both workspaces; payloads carry ``is_enterprise_install: true``.
      ``org_wide=False``: installed in each workspace separately (tokens ``xoxb-local-T0SALES`` /
      ``xoxb-local-T0SUPPORT``, bots ``W0SALESBOT`` / ``W0SUPPORTBOT``), ``enterprise_id`` still set.
    """
    org = Enterprise(id=ENTERPRISE_ID, name="Globex", domain="globex")
    teams = [
        Team(id=GRID_SALES, name="Globex Sales", domain="globex-sales", enterprise_id=org.id),
        Team(id=GRID_SUPPORT, name="Globex Support", domain="globex-support", enterprise_id=org.id),
    ]
    bots: dict[str, str] = {}
    if org_wide:
        org.org_install = True
        org.bot_user_id, org.bot_id, org.bot_token = GRID_BOT_USER_ID, GRID_BOT_ID, GRID_BOT_TOKEN
        for team in teams:
            team.bot_user_id, team.bot_id, team.bot_token = org.bot_user_id, org.bot_id, org.bot_token
            bots[team.id] = GRID_BOT_USER_ID
    else:
        for team in teams:
            suffix = team.id[1:]
            team.bot_user_id, team.bot_id, team.bot_token = f"W{suffix}BOT", f"B{suffix}BOT", f"xoxb-local-{team.id}"
            bots[team.id] = team.bot_user_id

    def grid_user(index: int, user_id: str, team: str, name: str, real: str, title: str, **extra: object) -> User:
        fields: dict[str, object] = {
            "id": user_id,
            "team_id": team,
            "name": name,
            "real_name": real,
            "title": title,
            "color": USER_COLORS[index % len(USER_COLORS)],
            "enterprise_id": org.id,
            "enterprise_name": org.name,
            "teams": [team],
            **extra,
        }
        return User.model_validate(fields)

    users = [
        grid_user(0, ANA, GRID_SALES, "ana", "Ana Alves", "Org admin", is_org_admin=True, is_org_owner=True),
        grid_user(1, BEN, GRID_SALES, "ben", "Ben Baker", "Sales rep"),
        grid_user(2, CHI, GRID_SUPPORT, "chi", "Chi Cho", "Support lead", is_admin=True),
        grid_user(3, DEV, GRID_SALES, "dev", "Dev Dutta", "Engineer", teams=[GRID_SALES, GRID_SUPPORT]),
    ]
    for bot_user in dict.fromkeys(bots.values()):
        home = next(t for t, b in bots.items() if b == bot_user)
        users.insert(
            0,
            User(
                id=bot_user,
                team_id=home,
                name="agent",
                real_name="agent",
                title="AI agent",
                is_bot=True,
                bot_id=GRID_BOT_ID if org_wide else f"B{home[1:]}BOT",
                color="2eb67d",
                enterprise_id=org.id,
                enterprise_name=org.name,
            ),
        )
    channels = [
        Channel(
            id=SALES_CHANNEL,
            team_id=GRID_SALES,
            name="sales",
            members=[bots[GRID_SALES], ANA, BEN, DEV],
            topic="Deals and refunds.",
        ),
        Channel(
            id=SUPPORT_CHANNEL,
            team_id=GRID_SUPPORT,
            name="support",
            members=[bots[GRID_SUPPORT], CHI, DEV],
            topic="Customer tickets.",
        ),
    ]
    return Seed(enterprises=[org], teams=teams, users=users, channels=channels)
