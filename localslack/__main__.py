"""Run the local Slack workspace on its own: ``python -m localslack --port 3001 --bot-url ... --signing-secret ...``.

``python -m localslack reset [--data-dir .data]`` forgets the workspace kept on disk.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from localslack.persistence import reset_command
from localslack.seed import grid_seed
from localslack.server import LocalSlack


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m localslack", description="A local Slack workspace for a bot."
    )
    parser.add_argument("command", nargs="?", choices=["serve", "reset"], default="serve",
                        help="serve (default), or reset: forget the workspace kept in --data-dir")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=3001, help="port for the UI and Web API (default 3001)")
    parser.add_argument(
        "--bot-url",
        default=os.environ.get("LOCALSLACK_BOT_URL", "http://127.0.0.1:3000/slack/events"),
        help="where events and interactions are POSTed (the bot's /slack/events)",
    )
    parser.add_argument(
        "--signing-secret",
        default=os.environ.get("SLACK_SIGNING_SECRET", "localslack-signing-secret"),
        help="signs every request like Slack (the bot's SLACK_SIGNING_SECRET)",
    )
    parser.add_argument("--retry", action="store_true", help=argparse.SUPPRESS)  # the default now
    parser.add_argument("--no-retry", action="store_true", help="do not retry failed event deliveries")
    parser.add_argument("--no-rate-limits", action="store_true", help="answer every call, however many")
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("BOT_DATA_DIR", ".data"),
        help="keep the workspace in <dir>/localslack.json across restarts (default: $BOT_DATA_DIR or .data)",
    )
    parser.add_argument("--memory", action="store_true", help="keep nothing on disk")
    parser.add_argument("--grid", action="store_true", help="an Enterprise Grid org with two workspaces")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    slack = LocalSlack(
        bot_url=args.bot_url,
        signing_secret=args.signing_secret,
        host=args.host,
        port=args.port,
        retry_delivery=not args.no_retry,
        rate_limits=not args.no_rate_limits,
        data_dir=None if args.memory else args.data_dir,
        seed=grid_seed() if args.grid else None,
    )
    await slack.start()
    print(f"Local Slack workspace: {slack.ui_url}", flush=True)
    print(f"  SLACK_API_URL={slack.api_url}  SLACK_BOT_TOKEN={slack.bot_token}", flush=True)
    print(f"  delivering to {args.bot_url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)  # a clean stop also when SIGINT is ignored by the parent
    try:
        await stop.wait()
    finally:
        await slack.stop()


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    if args.command == "reset":
        raise SystemExit(reset_command(args.data_dir))
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
