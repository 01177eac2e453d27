"""What people do with views: submit or close a modal (and what the bot's ack then does to it), open
App Home. Slack's rules for each are in their docstrings; the delivery is ``UserActions``'s."""

from __future__ import annotations

import time
from typing import Any

from localslack import blockkit, payloads
from localslack.actions import LocalSlackError, UserActions
from localslack.errors import ApiError
from localslack.models import DeliveryResult, Team, User, View


class ViewActions(UserActions):
    """Mixed into ``LocalSlack``: modals submitted and closed, App Home opened."""

    async def submit_view(
        self, user_id: str, view_id: str, values: dict[str, dict[str, Any]] | None = None
    ) -> DeliveryResult:
        """Press Submit on an open modal. ``values`` = {block_id: {action_id: value}} where a value is
        Slack's state dict (``{"type": "plain_text_input", "value": "…"}``) or a plain value (string,
        option value, list of user ids). Then applies the bot's ack: ``response_action`` errors / update /
        push / clear; an empty ack closes the modal."""
        user = self._user(user_id)
        target = self._target(user, view_id)
        view = target.view
        if view is None or view.type != "modal":
            raise LocalSlackError(f"{view_id!r} is not an open modal")
        for block_id, actions in (values or {}).items():
            for action_id, answer in actions.items():
                block, element = self._element(target, action_id, block_id)
                view.state_values.setdefault(block_id, {})[action_id] = blockkit.state_value(element, answer)
        self._fill_untouched_inputs(view)
        view.errors = {}
        trigger_id = self.ws.issue_trigger(user.id, target.installation.id)
        payload = payloads.view_submission(
            user=user,
            installation=target.installation,
            view=view,
            trigger_id=trigger_id,
            org=self.ws.enterprise_of(target.installation.id),
        )
        result = await self.deliverer.send_interaction(payload)
        if result.ok:
            self._apply_submission_ack(user, view, target.installation, result)
        self.ws.touch()
        return result

    def _fill_untouched_inputs(self, view: View) -> None:
        """Slack reports every input block on submission, typed or not (empty ones as null values)."""
        for block in view.blocks:
            if block.get("type") != "input" or not isinstance(block.get("element"), dict):
                continue
            element = block["element"]
            block_state = view.state_values.setdefault(str(block.get("block_id")), {})
            action_id = str(element.get("action_id"))
            if action_id not in block_state:
                block_state[action_id] = blockkit.initial_state_value(element) or blockkit.state_value(
                    element, None
                )

    def _apply_submission_ack(
        self, user: User, view: View, installation: Team, result: DeliveryResult
    ) -> None:
        ack = result.ack_json()
        action = ack.get("response_action") if isinstance(ack, dict) else None
        if action == "errors":
            view.errors = {str(k): str(v) for k, v in (ack.get("errors") or {}).items()}
        elif action == "update" and isinstance(ack.get("view"), dict):
            self.ws.replace_view(view, ack["view"], installation)
        elif action == "push" and isinstance(ack.get("view"), dict):
            pushed = self.ws.new_view(ack["view"], user_id=user.id, team=installation)
            try:
                self.ws.push_modal(user.id, pushed)
            except ApiError:
                result.detail = "push_limit_reached"
        elif action == "clear":
            self.ws.clear_modals(user.id)
        else:
            self.ws.pop_modal(user.id, view.id)

    async def close_view(self, user_id: str, view_id: str) -> DeliveryResult | None:
        """Press Cancel/close on a modal; delivers ``view_closed`` when the view asked (notify_on_close)."""
        user = self._user(user_id)
        target = self._target(user, view_id)
        view = target.view
        assert view is not None
        if view.clear_on_close:
            self.ws.clear_modals(user.id)
        else:
            self.ws.pop_modal(user.id, view.id)
        if not view.notify_on_close:
            return None
        payload = payloads.view_closed(
            user=user, installation=target.installation, view=view, org=self.ws.enterprise_of(target.installation.id)
        )
        return await self.deliverer.send_interaction(payload)

    async def open_home(self, user_id: str) -> DeliveryResult:
        """``user_id`` opens the bot's App Home tab → ``app_home_opened`` (tab "home")."""
        user = self._user(user_id)
        dm = self.ws.channel(self.dm_channel(user.id))
        installation = self.ws.team(dm.team_id)
        event: dict[str, Any] = {
            "type": "app_home_opened",
            "user": user.id,
            "channel": dm.id,
            "tab": "home",
            "event_ts": f"{time.time():.6f}",
        }
        home = self.ws.home_view(user.id, installation.id)
        if home is not None:
            event["view"] = home.to_slack()
        return await self.deliverer.send_event(self._app_envelope(event, installation, None))
