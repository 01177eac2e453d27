"""Helpers for the browser tests: Debian's Chromium, the product as ``make run`` starts it, failure artifacts.

- :func:`chromium_page` — headless ``/usr/bin/chromium`` with a fresh profile (Playwright's own browser
  download does not work here); skips the test when Chromium is missing.
- :func:`run_product` — ``python -m bot run`` in a subprocess with no Slack or OpenAI settings, so it starts
  the local workspace, the bot and the offline demo model; yields the workspace URL.
- :func:`artifacts_on_failure` — on any failure inside it, a screenshot, the page HTML and the bot's log
  go to ``test-artifacts/`` and their paths into the assertion message.
- :class:`WorkspacePage` — the local Slack page driven like a person: switch user, type, open threads, Home.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Locator, Page, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
STEP_TIMEOUT_MS = 20_000  # per Playwright step; each is normally well under a second
STARTUP_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0
ARTIFACTS_DIR = Path(__file__).resolve().parent.parent / "test-artifacts"
URL_LINE = re.compile(r"Local Slack workspace: (http://\S+)")
# Everything that could point the product at a real Slack, a real model or a different setup.
_FOREIGN_ENV = re.compile(r"^(SLACK_|OPENAI_|BOT_|REDIS_|LOCALSLACK_)|^(MODEL|PORT|HOST)$")


# ---- the browser ------------------------------------------------------------------------------------


@asynccontextmanager
async def chromium_page(profile_dir: Path) -> AsyncIterator[Page]:
    """A page in a fresh headless Chromium profile; every Playwright step times out after 20 s."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (.ci/run installs it with `apt-get install chromium`)")
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile_dir),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            context.set_default_timeout(STEP_TIMEOUT_MS)
            page = context.pages[0] if context.pages else await context.new_page()
            yield page
        finally:
            await context.close()


# ---- the product ------------------------------------------------------------------------------------


@dataclass
class RunningProduct:
    process: asyncio.subprocess.Process
    ui_url: str
    log_path: Path

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else "(no log)"


def product_env(redis_url: str, data_dir: Path, **settings: str) -> dict[str, str]:
    """The environment of a fresh machine: no tokens, no model key; ports chosen by the OS; ``settings`` (say
    ``BOT_AGENT``) as a person would put them in ``.env``."""
    env = {k: v for k, v in os.environ.items() if not _FOREIGN_ENV.search(k)}
    env.update(PORT="0", LOCALSLACK_PORT="0", REDIS_URL=redis_url, BOT_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
    env.update(settings)
    return env


@asynccontextmanager
async def run_product(redis_url: str, workdir: Path, **settings: str) -> AsyncIterator[RunningProduct]:
    """``python -m bot run`` as ``make run`` starts it; stopped (SIGTERM, then SIGKILL) on exit.

    It runs in ``workdir`` so a developer's ``.env`` in the repository cannot leak tokens into it.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "bot.log"
    with log_path.open("wb") as log_file:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "run",
            cwd=workdir,
            env=product_env(redis_url, workdir / "data", **settings),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        url = await _wait_for_url(process, log_path)
        yield RunningProduct(process=process, ui_url=url, log_path=log_path)
    finally:
        await _stop(process)


async def _wait_for_url(process: asyncio.subprocess.Process, log_path: Path) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        match = URL_LINE.search(log_path.read_text(errors="replace"))
        if match:
            return match.group(1)
        if process.returncode is not None:
            break
        await asyncio.sleep(0.05)
    tail = log_path.read_text(errors="replace")[-3000:]
    raise AssertionError(f"`python -m bot run` printed no 'Local Slack workspace: <url>' line:\n{tail}")


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)  # graceful: the bot closes Redis and the workspace
    try:
        await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()


# ---- failure artifacts ------------------------------------------------------------------------------


async def save_artifacts(
    page: Page, name: str, product: RunningProduct | None = None, error: BaseException | None = None
) -> list[Path]:
    """A screenshot, the page HTML, the bot's log and the error under ``test-artifacts/<name>.*``."""
    ARTIFACTS_DIR.mkdir(exist_ok=True)
    stem = ARTIFACTS_DIR / re.sub(r"[^\w.-]+", "_", name)
    saved: list[Path] = []
    if error is not None:
        Path(f"{stem}.error.txt").write_text(f"{type(error).__name__}: {error}\n")
        saved.append(Path(f"{stem}.error.txt"))
    try:
        await page.screenshot(path=f"{stem}.png", full_page=True, timeout=5_000)
        saved.append(Path(f"{stem}.png"))
    except Exception as exc:  # noqa: BLE001 - a missing screenshot must not hide the real failure
        saved.append(Path(f"{stem}.png (not saved: {exc!r})"))
    try:
        Path(f"{stem}.html").write_text(await page.content())
        saved.append(Path(f"{stem}.html"))
    except Exception as exc:  # noqa: BLE001
        saved.append(Path(f"{stem}.html (not saved: {exc!r})"))
    if product is not None and product.process.returncode is None:
        saved.append(_process_state(product.process.pid, Path(f"{stem}.process.txt")))
        product.process.send_signal(signal.SIGUSR2)  # every thread's stack (even with its event loop blocked)
        product.process.send_signal(signal.SIGUSR1)  # what each of its asyncio tasks waits on
        await asyncio.sleep(0.5)
    if product is not None and product.log_path.exists():
        Path(f"{stem}.bot.log").write_bytes(product.log_path.read_bytes())
        saved.append(Path(f"{stem}.bot.log"))
    return saved


def _process_state(pid: int, path: Path) -> Path:
    """What the kernel says the bot's threads are doing (state and wait channel: ``D`` and a ``wchan`` in the
    filesystem mean blocked on the disk, which stops its event loop), and its Python stacks when py-spy is
    installed (read from outside: answers even when the process cannot write)."""
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            status = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines() if ":" in line)
            wchan = (task / "wchan").read_text().strip()
        except OSError:
            continue
        lines.append(f"thread {task.name} {status.get('Name', '').strip()}: {status.get('State', '').strip()}, "
                     f"wchan {wchan or '-'}")
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if Path(spy).exists():
        try:
            dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20)
            lines += ["", dump.stdout, dump.stderr]
        except (OSError, subprocess.SubprocessError) as exc:
            lines.append(f"py-spy failed: {exc!r}")
    path.write_text("\n".join(lines) + "\n")
    return path


@asynccontextmanager
async def artifacts_on_failure(
    page: Page, name: str, product: RunningProduct | None = None
) -> AsyncIterator[None]:
    """Turn any failure inside into an AssertionError naming the saved screenshot, HTML and bot log."""
    try:
        yield
    except Exception as exc:
        saved = await save_artifacts(page, name, product, exc)
        listing = "\n".join(f"  {p}" for p in saved)
        raise AssertionError(f"{name}: {exc}\nartifacts:\n{listing}") from exc


# ---- the page, driven like a person -----------------------------------------------------------------


class WorkspacePage:
    """The local Slack page: every method is something a person does or sees."""

    def __init__(self, page: Page) -> None:
        self.page = page

    async def open(self, url: str) -> None:
        await self.page.goto(url)
        await self.page.locator("#user-switcher option").first.wait_for(state="attached")

    async def act_as(self, user_id: str) -> None:
        """Pick a person in the "Viewing as" switcher and wait until the page is drawn for them."""
        await self.page.select_option("#user-switcher", user_id)
        await self.page.locator(f'#me-avatar[src*="{user_id}"]').wait_for(state="attached")

    async def open_channel(self, name: str) -> None:
        await self.page.locator("#nav-channels .nav-item", has_text=name).click()
        await self.page.locator("#conv-name", has_text=f"# {name}").wait_for()

    async def open_home(self) -> Locator:
        await self.page.locator("#nav-apps .nav-item", has_text="Home").click()
        home = self.page.locator("#home")
        await home.wait_for()
        return home

    async def send(self, text: str) -> None:
        composer = self.page.locator("#composer-input")
        await composer.fill(text)
        await composer.press("Enter")

    def message(self, text: str) -> Locator:
        """A message in the open channel (not in a thread) containing ``text``."""
        return self.page.locator("#messages .msg", has_text=text)

    async def open_thread_of(self, text: str) -> Locator:
        """Click "N replies" under the message containing ``text``; returns the thread's message list."""
        await self.message(text).locator(".thread-summary").click()
        thread = self.page.locator("#thread-messages")
        await thread.wait_for()
        return thread

    def thread_message(self, text: str) -> Locator:
        return self.page.locator("#thread-messages .msg", has_text=text)

    @property
    def banner(self) -> Locator:
        return self.page.locator("#banner")
