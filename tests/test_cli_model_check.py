"""`python -m bot check` really calls the model endpoint: OK with the model's name, or one line
naming the setting to fix and a non-zero exit when the endpoint is down, refuses the key, or lacks the model."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
from pathlib import Path

from tests.fakes.openai_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
WORKDIR = Path(tempfile.mkdtemp(prefix="bot-check-"))  # not the repository: its .env must not leak in


async def check(redis_url: str, **env: str) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "BOT_", "MODEL"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "check", cwd=WORKDIR,
        env={**clean, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url, "BOT_TOOLS": "", **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


async def test_check_calls_the_model_endpoint_and_names_what_to_fix(redis_url):
    async with FakeOpenAI(api_key="sk-right") as fake:
        base = {"OPENAI_BASE_URL": fake.base_url, "MODEL": "gpt-4o-mini"}
        (ok, ok_out), (refused, refused_out), (unknown, unknown_out), (down, down_out) = await asyncio.gather(
            check(redis_url, **base, OPENAI_API_KEY="sk-right"),
            check(redis_url, **base, OPENAI_API_KEY="sk-wrong-key"),
            check(redis_url, **{**base, "MODEL": "gpt-nonexistent"}, OPENAI_API_KEY="sk-right"),
            check(redis_url, OPENAI_BASE_URL=f"http://127.0.0.1:{closed_port()}/v1", OPENAI_API_KEY="sk-right"),
        )
        assert any(r.path == "/v1/models" for r in fake.requests)
    assert ok == 0 and f"model: ok, gpt-4o-mini at {fake.base_url}" in ok_out, ok_out
    assert refused == 1 and "model: refused (401)" in refused_out and "OPENAI_API_KEY" in refused_out, refused_out
    assert "sk-wrong-key" not in refused_out
    assert unknown == 1 and "gpt-nonexistent" in unknown_out and "MODEL" in unknown_out, unknown_out
    assert down == 1 and "model: NOT reachable" in down_out and "OPENAI_BASE_URL" in down_out, down_out


async def test_check_names_the_provider_kind_and_the_fallback_in_force(redis_url):
    async with FakeOpenAI(api_key="sk-right") as fake:
        fake.refuse_when(lambda body: "stream_options" in body, "proxy_400_unknown_stream_options.json")
        plain_code, plain_out = await check(
            redis_url, OPENAI_BASE_URL=fake.base_url, MODEL="gpt-4o-mini", OPENAI_API_KEY="sk-right")
    assert plain_code == 0, plain_out
    assert "model: provider: OpenAI-compatible" in plain_out, plain_out
    assert "model: fallback in force: streams without stream_options (the endpoint refused it)" in plain_out


async def test_check_says_an_account_out_of_credit_plainly(redis_url):
    async with FakeOpenAI(api_key="sk-right") as fake:
        fake.reply_recorded("openai_429_insufficient_quota.json")
        code, out = await check(redis_url, OPENAI_BASE_URL=fake.base_url, MODEL="gpt-4o-mini", OPENAI_API_KEY="sk-right")
    assert code == 1 and "The model account is out of credit (insufficient_quota)" in out, out
