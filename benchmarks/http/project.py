"""The project as a contender process: ``python -m benchmarks.http.project --slack-url … --model-url … …``.

The real app, built by ``bot.app.start_bot`` as the end-to-end tests build it, with the model an
``OpenAIChatModel`` calling the bench's model server over HTTP and one tool (``tools.refund_charge``,
policy ``always()``); with ``--agent``, ``BOT_AGENT`` names a framework's agent instead
(``framework_agents``: the same tool, gated by the framework) and the engine drives that. Its own process, so its CPU time is its own and its event loop serves nothing
but the app.

The bench starts it with ``SLACK_PACING=off`` in its environment (read by ``Settings``), the setting
for apps with raised limits (no pacing of its own: by default one post a second per channel after a
burst of 4, ``chat.update`` once a second per workspace after a burst of 20, Tier 3): the bench runs
LocalSlack without rate limits, so the bare Bolt app may call Slack as fast as it likes, and with the
pacing on, the project would be measured waiting out Slack's limits instead of doing work.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from .serve import serve_until_stopped


async def main(args: argparse.Namespace) -> None:
    from bot.app import start_bot
    from bot.config import Settings
    from bot.models.openai import OpenAIChatModel

    from .framework_agents import MODEL_URL_ENV
    from .tools import refund_charge

    if args.agent:  # a framework's agent (framework_agents): its own client calls the bench model
        os.environ[MODEL_URL_ENV] = args.model_url
    settings = Settings(_env_file=None, SLACK_BOT_TOKEN=args.token, SLACK_SIGNING_SECRET=args.secret,  # type: ignore[call-arg]
                        SLACK_API_URL=args.slack_url, REDIS_URL=args.redis_url, BOT_TOOLS="",
                        BOT_DATA_DIR=args.data_dir, BOT_AGENT=args.agent or None,
                        # the bench strips BOT_* from the children's environment; these it may set
                        **{name: v for name in ("BOT_MAX_ACTIVE_TURNS", "BOT_DELAY_SCALE")
                           if (v := os.environ.get(name))})
    model = OpenAIChatModel("bench-model", base_url=args.model_url, api_key="sk-bench")
    bot = await start_bot(settings, model=model, tools=[] if args.agent else [refund_charge], host="127.0.0.1", port=0,
                          recovery_interval=0)
    try:
        await serve_until_stopped(f"{bot.url}/slack/events", bot.runtime.wait_idle)
    finally:
        await bot.close()
        await model.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http.project")
    for name in ("--secret", "--token", "--slack-url", "--model-url", "--redis-url", "--data-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument("--agent", help="BOT_AGENT: a framework's agent in place of the built-in loop, "
                                        "e.g. benchmarks.http.framework_agents:pydantic_ai")
    asyncio.run(main(parser.parse_args()))
