"""CPU of the model client alone: ``python -m benchmarks.model_client --calls 500``.

One streamed completion after another (``OpenAIChatModel.complete``, with usage and an ``on_text``
callback, as the turn loop calls it) against the bench's model server (``benchmarks.http.model``),
which runs in a child process so that this process's CPU time (``time.process_time``) is the client's
own: building the request, the HTTP exchange, reading and parsing the server-sent events. Calls
alternate between the two answers of an approve cycle: a streamed tool call and a streamed text.

Prints CPU and wall time per call. Compare two versions of the client back to back by running the
command alternately with each on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

from bot.models import OpenAIChatModel, ToolSpec

SERVER = """
import asyncio, sys
from benchmarks.http.model import BenchModel

async def main():
    model = BenchModel()
    print(await model.start(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin

asyncio.run(main())
"""

REFUND = ToolSpec(name="refund_charge", description="Refund a charge.",
                  parameters={"type": "object", "properties": {"charge_id": {"type": "string"},
                                                               "amount": {"type": "number"}}})
ASK = [{"role": "user", "content": "please refund ch_1"}]
RESULT = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "refund_charge", "arguments": '{"charge_id": "ch_1"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "refunded"}]


async def _run(base_url: str, calls: int, warmup: int) -> tuple[float, float]:
    async def on_text(delta: str) -> None:
        pass

    async with OpenAIChatModel("bench-model", base_url=base_url, api_key="sk-bench", max_retries=0) as model:
        async def one(n: int) -> None:
            response = await model.complete(RESULT if n % 2 else ASK, [REFUND], on_text=on_text)
            assert (response.text == "Refunded.") if n % 2 else response.tool_calls, response

        for n in range(warmup):
            await one(n)
        cpu, wall = time.process_time(), time.perf_counter()
        for n in range(calls):
            await one(n)
        return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=os.environ.copy())
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        cpu, wall = asyncio.run(_run(base_url, args.calls, args.warmup))
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=10)
    import bot.models.openai as client

    print(f"{args.calls} streamed completions ({client.__file__}): "
          f"CPU {cpu / args.calls * 1e6:.0f} µs per call, wall {wall / args.calls * 1e6:.0f} µs per call; "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
