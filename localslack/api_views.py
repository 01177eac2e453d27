"""Slack's ``views.*`` methods: modals (open, push, update) and App Home (publish), each view checked
as Slack checks it."""

from __future__ import annotations

from typing import Any

from localslack import blockkit
from localslack.api_base import MethodGroup
from localslack.api_request import Handler, Params
from localslack.errors import ApiError, error_messages


class ViewMethods(MethodGroup):
    """``views.*``: modals opened, pushed and updated by trigger or view id, and App Home published."""

    def handlers(self) -> dict[str, Handler]:
        return {
            "views.open": self.views_open,
            "views.push": self.views_push,
            "views.update": self.views_update,
            "views.publish": self.views_publish,
        }

    def _checked_view(self, p: Params) -> dict[str, Any]:
        view = p.get("view")
        if view is None:
            raise ApiError("invalid_arguments", extra=error_messages("missing required field: view"))
        errors = blockkit.validate_view(view)
        if "view_too_large" in errors:
            raise ApiError("view_too_large")
        if errors:
            raise ApiError("invalid_arguments", extra=error_messages(*errors))
        return dict(view)

    def views_open(self, p: Params) -> dict[str, Any]:
        view = self._checked_view(p)
        if view.get("type") != "modal":
            raise ApiError(
                "invalid_arguments", extra=error_messages("must be modal [json-pointer:/view/type]")
            )
        trigger = self.ws.use_trigger(p.text("trigger_id"))
        team = self._installation_team(p, trigger.team_id)
        stored = self.ws.new_view(view, user_id=trigger.user_id, team=team)
        self.ws.open_modal(trigger.user_id, stored)
        return {"view": stored.to_slack()}

    def views_push(self, p: Params) -> dict[str, Any]:
        view = self._checked_view(p)
        if view.get("type") != "modal":
            raise ApiError(
                "invalid_arguments", extra=error_messages("must be modal [json-pointer:/view/type]")
            )
        trigger = self.ws.use_trigger(p.text("trigger_id"))
        if len(self.ws.modal_stack(trigger.user_id)) >= 3:
            raise ApiError("push_limit_reached")
        team = self._installation_team(p, trigger.team_id)
        stored = self.ws.new_view(view, user_id=trigger.user_id, team=team)
        self.ws.push_modal(trigger.user_id, stored)
        return {"view": stored.to_slack()}

    def views_update(self, p: Params) -> dict[str, Any]:
        view_id, external_id = p.text("view_id"), p.text("external_id")
        if not view_id and not external_id:
            raise ApiError("invalid_arguments", extra=error_messages("view_id or external_id is required"))
        view = self._checked_view(p)
        current = self.ws.find_view(view_id, external_id)
        if current is None or not p.auth.reaches(current.team_id) or not self.ws.is_open(current):
            raise ApiError("not_found")
        expected_hash = p.text("hash")
        if expected_hash and expected_hash != current.hash:
            raise ApiError("hash_conflict")
        if view.get("type") != current.type:
            raise ApiError(
                "invalid_arguments", extra=error_messages("view type cannot change [json-pointer:/view/type]")
            )
        updated = self.ws.replace_view(current, view, self.ws.team(current.team_id))
        return {"view": updated.to_slack()}

    def views_publish(self, p: Params) -> dict[str, Any]:
        user_id = p.text("user_id", required=True)
        user = self.ws.user(user_id)
        view = self._checked_view(p)
        if view.get("type") != "home":
            raise ApiError(
                "invalid_arguments", extra=error_messages("must be home [json-pointer:/view/type]")
            )
        team = self._installation_team(p, user.team_id if p.auth.is_enterprise_install else None)
        current = self.ws.home_view(user.id, team.id)
        expected_hash = p.text("hash")
        if expected_hash and current is not None and expected_hash != current.hash:
            raise ApiError("hash_conflict")
        stored = self.ws.publish_home(user.id, team, view)
        return {"view": stored.to_slack()}
