"""``POST /demo-model/v1/chat/completions``: the offline demo model as an OpenAI-compatible endpoint, served
beside the local workspace so a framework's agent (``BOT_AGENT``) runs with no key (``bot.models.demo_http``)."""

from __future__ import annotations

import json

from aiohttp import web

from bot.models.demo import DemoModel
from bot.models.demo_http import PATH, completion_chunks, completion_json, demo_completion


def add_routes(app: web.Application) -> None:
    model = DemoModel()

    async def completions(request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "the body must be a JSON object",
                                                "type": "invalid_request_error"}}, status=400)
        response = await demo_completion(body, model)
        if not body.get("stream"):
            return web.json_response(completion_json(response))
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await stream.prepare(request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for event in completion_chunks(response, include_usage=include_usage):
            await stream.write(event.encode())
        await stream.write_eof()
        return stream

    app.router.add_post(PATH, completions)
