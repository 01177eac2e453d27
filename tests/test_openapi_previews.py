"""An OpenAPI operation's preview: the connection names a GET operation
(``preview: {addNote: getCustomer}``), called with the proposed arguments it takes, the session's tenant
and the configured credential when the card is made; the operation itself runs only once approved."""

from __future__ import annotations

import pytest

from bot.connections.openapi import OpenAPIError, openapi_tools
from bot.models.scripted import ScriptedModel, call
from bot.models.scripted import say as model_say
from tests.engine.harness import approve, make_runtime, say
from tests.test_openapi_tools import SEEN, crm  # noqa: F401 - crm is the fixture: a real local HTTP API


def with_preview(tmp_path, config: str, preview: str) -> str:
    path = tmp_path / "with_preview.yaml"
    path.write_text(open(config).read().replace("[getCustomer, addNote]", "[addNote]") + f"    preview: {preview}\n")
    return str(path)


async def test_a_get_named_as_the_preview_is_on_the_card_and_the_post_waits(redis, crm, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("CRM_TOKEN", "s3cret")
    tools = openapi_tools(with_preview(tmp_path, crm, "{addNote: getCustomer}"))
    assert [t.name for t in tools] == ["crm_addNote"]  # the preview is not a tool of the model's
    model = ScriptedModel([call("crm_addNote", customer_id="c1", body={"text": "called back"}), model_say("ok")])
    runtime, channel, _ = make_runtime(redis, model, tools)
    await say(runtime, "note it")
    [card] = channel.requests()
    assert card.preview == '{"id": "c1", "name": "Acme"}'
    # only the GET, with the session's tenant and the credential; the note was not posted
    assert SEEN == [{"path": "/api/customers/c1", "query": {"workspace": "T1"}, "auth": "Bearer s3cret"}]
    await approve(runtime, card.request_id)
    assert [s["path"] for s in SEEN] == ["/api/customers/c1", "/api/customers/c1/notes"]


def test_a_preview_that_is_not_a_get_is_refused(tmp_path, crm):  # noqa: F811
    with pytest.raises(OpenAPIError, match="preview of addNote.*addNote is POST"):
        openapi_tools(with_preview(tmp_path, crm, "{addNote: addNote}"))
