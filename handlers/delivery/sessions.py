"""Each turn's thread as a Slack agent session (``agents.sessions.setStatus``).

The status follows the session's committed events, set by the outbox consumer (``handlers.delivery.channel``), so
any replica sets it and a replica that dies mid-turn leaves it to the next delivery of the same events:
``processing`` while the agent works (titled with the thread's first request), ``suspended`` while the
turn waits on a person (the title says on whom), ``active`` when it answered or failed, ``closed`` when it
was stopped.

Like the status line (``handlers.delivery.status``), a status that would last less than the status delay is not
shown: the budget allows one session call in a quick approve cycle (card, update, reply: four in all).
``processing`` comes only once a step is still running after the delay (Slack's stop button with it);
``suspended`` at once only when the session showed the agent working, else once the card has waited the
delay (:meth:`AgentSessions.suspend_later`, in this process: a kill -9 meanwhile leaves the session as it
was, never ``processing``). Slack titles a session only when a status creates it, so a session created
``suspended`` is titled with whom it waits on, and one that exists is renamed; leaving ``suspended`` gives
the request's title back.

Where Slack refuses the methods for the app (a workspace that does not know them, an app not declared as
an agent, a token without the scope) the workspace is remembered and never asked again by this process:
the thread keeps today's status line (``handlers.delivery.status``), and the refusal is logged once, at info.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from slack_sdk.errors import SlackApiError

from bot.ports import RetryLater
from bot.protocol import InputRequest
from bot.session import SessionRef
from handlers.delivery.pacing import retry_after
from handlers.delivery.status import STATUS_DELAY_S
from handlers.shared.deps import ClientFor
from store.outbox import RedisOutbox

log = logging.getLogger(__name__)

SessionStatus = Literal["processing", "suspended", "active", "closed"]
STATUS_FIELD = "agent_session"  # the session's channel field that holds the status last set
TITLE_FIELD = "title"  # SessionRef.channel: the first request's title (handlers.events; a session keeps its first ref)
WAITS_KEPT = 10_000  # sessions whose waits this process remembers
SUSPENDING_GRACE_S = 5.0  # how long an ending waits for a suspended being set right now
TITLE_MAX = 200  # Slack's limit for a session's title
# Slack refuses the agent surface for this app or workspace: fall back, once per workspace
REFUSED = {"unknown_method", "not_authorized", "missing_scope", "not_agent_app", "not_allowed_token_type",
           "no_permission"}


def title_of(text: str) -> str:
    """A session title from a person's first request: its first line, shortened."""
    first = next((line for line in (text or "").splitlines() if line.strip()), "")
    line = " ".join(first.split())  # the first line only: what follows (context the app added) is not a title
    return line if len(line) <= TITLE_MAX else line[: TITLE_MAX - 1] + "…"


def _who(req: InputRequest, names: dict[str, str]) -> str:
    responders = req.responders
    people = [p.slack_user_id for p in (responders.people if responders else []) if p.slack_user_id]
    if responders is None or responders.rule in ("anyone", "anyone_but", "custom") or not people:
        return "an approver" if req.kind == "tool-approval" else "a person"
    # a session title is plain text: a mention would show as a raw id, so people are named by handle
    shown = [f"@{names[u]}" if u in names else "an approver" for u in people[:3]]
    return " or ".join(dict.fromkeys(shown + (["others"] if len(people) > 3 else [])))


def waiting_on(requests: list[InputRequest]) -> list[str]:
    """The Slack user ids the title of :func:`waiting_title` would name."""
    responders = requests[0].responders
    return [p.slack_user_id for p in (responders.people if responders else [])[:3] if p.slack_user_id]


def waiting_title(requests: list[InputRequest], names: dict[str, str] | None = None) -> str:
    """"Waiting for @bob to approve refund_charge": whom the turn waits on, for what. ``names``: Slack
    user id → handle, for the people it names (an unknown one reads "an approver")."""
    req = requests[0]
    if req.kind == "tool-approval" and req.action is not None:
        what = f"approve {req.action.tool_name}"
    else:
        what = "answer"
    more = f" (+{len(requests) - 1} more)" if len(requests) > 1 else ""
    return title_of(f"Waiting for {_who(req, names or {})} to {what}{more}")


class AgentSessions:
    def __init__(self, store: RedisOutbox, client_for: ClientFor, delay_s: float = STATUS_DELAY_S):
        self.store = store
        self.ledger = store.posts  # where the session's posts are
        self.client_for = client_for
        self.delay_s = delay_s
        self._refused: set[str] = set()  # workspaces (team ids) where Slack refused the methods
        self._handles: dict[tuple[str, str], str] = {}  # (team, user) → handle, for titles; kept per process
        self._waits: dict[str, list[str]] = {}  # session → the requests its turn waits on (its last cards)
        self._later: dict[str, asyncio.Task[None]] = {}  # session → its suspended, not shown yet
        self._suspending: set[str] = set()  # sessions whose suspended is being set now

    def available(self, session: SessionRef) -> bool:
        return bool(session.channel.get("thread_ts")) and (session.team_id or "") not in self._refused

    async def current(self, session: SessionRef) -> str | None:
        """The status last set (kept beside the session: any replica reads it; a delivery pass has it)."""
        return await self.ledger.get(session.session_id, STATUS_FIELD)

    async def set(self, session: SessionRef, status: SessionStatus, title: str | None = None) -> bool:
        """Set the thread's session status (``title`` names a session created now; Slack ignores it for an
        existing one); False when it has none here (refused: the status line serves)."""
        # only an ending must land (no session left processing); a rate-limited processing or suspended is
        # skipped rather than holding up the card or reply queued behind it
        ok = await self._call(session, "agents.sessions.setStatus", must=status in ("active", "closed"),
                              status=status, title=title or None)
        if ok:  # with the pass's closing round trip (at once outside a pass): a kill -9 before it makes the
            # next deliverer tell Slack the same status again, which changes nothing there
            await self.ledger.set(session.session_id, STATUS_FIELD, status, in_pass=True)
        return ok

    def waits_on(self, session: SessionRef, request_ids: list[str]) -> None:
        """The turn waits on these requests (its cards are up)."""
        self._waits.pop(session.session_id, None)
        self._waits[session.session_id] = list(request_ids)
        if len(self._waits) > WAITS_KEPT:  # turns that ended on another replica: forget the oldest
            self._waits.pop(next(iter(self._waits)))

    async def still_waiting(self, session: SessionRef) -> bool:
        """Whether a request the turn waited on (:meth:`waits_on`) is still open: one read, on slow steps only."""
        ids = self._waits.get(session.session_id)
        if not ids:
            return False
        if any(r.status == "open" for r in await self.store.get_requests(ids)):
            return True
        self._waits.pop(session.session_id, None)
        return False

    def suspend_later(self, session: SessionRef, suspend: Callable[[], Awaitable[None]]) -> None:
        """Run ``suspend`` once the status delay has passed, unless the turn ends first (:meth:`ended`);
        it replaces one not run yet. Best effort, like the status line."""
        self._cancel_later(session.session_id)
        task = asyncio.create_task(self._after_delay(session, suspend))
        self._later[session.session_id] = task
        task.add_done_callback(lambda t, sid=session.session_id: self._later.pop(sid, None)
                               if self._later.get(sid) is t else None)

    async def ended(self, session: SessionRef) -> None:
        """The turn answered, failed or stopped: it waits on nobody, and a suspended not shown yet never is
        (one being set right now is let finish first, so the ending is the status set last)."""
        sid = session.session_id
        self._waits.pop(sid, None)
        task = self._later.get(sid)
        if task is not None and sid in self._suspending:
            with contextlib.suppress(Exception, TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), SUSPENDING_GRACE_S)
        self._cancel_later(sid)

    async def close(self) -> None:
        tasks = list(self._later.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _cancel_later(self, sid: str) -> None:
        task = self._later.pop(sid, None)
        if task is not None and sid not in self._suspending:
            task.cancel()

    async def _after_delay(self, session: SessionRef, suspend: Callable[[], Awaitable[None]]) -> None:
        await asyncio.sleep(self.delay_s)
        self._suspending.add(session.session_id)
        try:
            await suspend()
        except Exception:  # noqa: BLE001 - cosmetic: the card says whom it waits on anyway
            log.info("suspended not shown for %s", session.session_id, exc_info=True)
        finally:
            self._suspending.discard(session.session_id)

    async def rename(self, session: SessionRef, title: str) -> bool:
        return await self._call(session, "agents.sessions.rename", title=title)

    async def handles(self, session: SessionRef, user_ids: list[str]) -> dict[str, str]:
        """Slack user id → handle (``users.info``, once per person per process); one Slack can't give is
        left out, so the title says "an approver" rather than a raw id."""
        team = session.team_id
        client = await self.client_for(team)
        for user in user_ids:
            if (team, user) in self._handles:
                continue
            try:
                info = (await client.users_info(user=user))["user"]
            except SlackApiError as exc:
                log.info("no name for %s in a session title: %s", user, exc.response.get("error"))
                continue
            handle = (info.get("profile") or {}).get("display_name") or info.get("name")
            if isinstance(handle, str) and handle:
                self._handles[(team, user)] = handle
        return {u: self._handles[(team, u)] for u in user_ids if (team, u) in self._handles}

    async def _call(self, session: SessionRef, method: str, *, must: bool = False, **args: str | None) -> bool:
        """Best effort: a rate limit or Slack's 5xx raises when it ``must`` land (the outbox retries the
        event), else it is logged and skipped; a refusal of the agent surface is remembered for the
        workspace; anything else is logged."""
        if not self.available(session):
            return False
        client = await self.client_for(session.team_id)
        payload = {"channel_id": session.channel["channel_id"], "thread_ts": session.channel["thread_ts"],
                   **{k: v for k, v in args.items() if v is not None}}
        try:
            await client.api_call(method, json=payload)
        except SlackApiError as exc:
            error = exc.response.get("error")
            limited = exc.response.status_code == 429 or error == "ratelimited"
            if must and limited:
                raise RetryLater(retry_after(exc), f"Slack rate limited {method}") from exc
            if must and exc.response.status_code >= 500:
                raise
            if limited or exc.response.status_code >= 500:
                log.info("%s for %s skipped: %s", method, session.session_id, error or exc.response.status_code)
                return False
            if error in REFUSED:
                if (session.team_id or "") not in self._refused:
                    log.info("no agent sessions in workspace %s (%s): the status line instead", session.team_id,
                             error)
                self._refused.add(session.team_id or "")
            else:
                log.info("%s for %s refused: %s", method, session.session_id, error)
            return False
        return True
