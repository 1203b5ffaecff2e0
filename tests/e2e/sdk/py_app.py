"""An application written against the released Python SDK (`resonate-sdk`), as its users write one.

It runs as a worker process (`python -m tests.sdk.py_app URL GROUP`) and is imported by
tests/sdk/test_python_sdk.py, whose clients register the same functions. It knows nothing of
Django: it reaches the server only through the SDK's public API.

Every function appends what it did to the journal file named by SDK_JOURNAL (one JSON line per
event, written with a single O_APPEND write, so several processes can share the file). The tests
read the journal to count how often a body really ran.
"""

import argparse
import asyncio
import json
import os
import signal
import time
from datetime import timedelta

from resonate.context import Context
from resonate.resonate import Resonate
from resonate.retry import Constant, Never


def journal(event, key, **fields):
    path = os.environ.get("SDK_JOURNAL")
    if not path:
        return
    line = json.dumps({"event": event, "key": key, "pid": os.getpid(), "at": time.time() * 1000, **fields})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def greet(ctx: Context, name: str) -> str:
    return f"hello {name}"


async def once(ctx: Context, key: str) -> str:
    """A body that must run once however many callers start it."""
    journal("once", key)
    await asyncio.sleep(0.5)
    return f"once:{key}"


async def square(ctx: Context, n: int) -> int:
    return n * n


async def fan_out(ctx: Context, n: int) -> dict:
    """n local children (`ctx.run`) and n remote ones (`ctx.rpc` to the group: the parent suspends)."""
    local = [ctx.run(square, i) for i in range(n)]
    remote = [ctx.rpc(square, i) for i in range(n)]
    return {"local": sum([await f for f in local]), "remote": sum([await f for f in remote])}


async def chain(ctx: Context, n: int) -> int:
    """n remote steps one after another: each `ctx.rpc` suspends the workflow until a worker answers (bench/)."""
    total = 0
    for i in range(n):
        total += await ctx.rpc(square, i)
    return total


async def stamp(ctx: Context) -> float:
    return time.time() * 1000


async def napper(ctx: Context, seconds: float) -> dict:
    """Durable sleep between two recorded instants; a replay reads `before` back from its promise."""
    before = await ctx.run(stamp)
    await ctx.sleep(timedelta(seconds=seconds))
    after = await ctx.run(stamp)
    return {"before": before, "after": after}


async def announce(ctx: Context, key: str, promise_id: str) -> None:
    journal("awaiting", key, promise=promise_id)


async def approval(ctx: Context, key: str) -> str:
    """Human in the loop: wait for a promise that someone outside settles."""
    decision = ctx.promise()
    await ctx.run(announce, key, await decision.id())
    try:
        return f"approved:{await decision}"
    except Exception as error:  # the rejection arrives as an exception
        return f"rejected:{error}"


async def flaky(ctx: Context, key: str, failures: int) -> str:
    """Fails its first `failures` attempts; registered with a retry policy."""
    attempt = sum(1 for event in read_journal() if event["event"] == "flaky" and event["key"] == key)
    journal("flaky", key)
    if attempt < failures:
        raise RuntimeError(f"attempt {attempt + 1} of {key} fails")
    return f"{key} succeeded on attempt {attempt + 1}"


async def broken(ctx: Context, why: str) -> str:
    raise ValueError(why)


async def step(ctx: Context, key: str, name: str) -> str:
    journal("start", key, step=name)
    if name == "two" and os.environ.get("SDK_HANG_IN_STEP_TWO"):
        await asyncio.sleep(3600)  # the test kills this worker here
    journal("done", key, step=name)
    return name


async def steps(ctx: Context, key: str) -> list:
    return [await ctx.run(step, key, name) for name in ("one", "two", "three")]


async def tick(ctx: Context, key: str) -> None:
    journal("tick", key)


async def parent_of_detached(ctx: Context, key: str) -> str:
    """Starts a detached child and returns its id without waiting for it."""
    return await ctx.detached("slow_square", 7).id()


async def slow_square(ctx: Context, n: int) -> int:
    await asyncio.sleep(1)
    return n * n


async def pipeline(ctx: Context, key: str) -> dict:
    """A fan-out whose children run on workers: three squares, one step that fails once and is retried, and one
    that fails for good, which the workflow catches (the console's workflow page shows such a run)."""
    squares = [ctx.rpc(square, i) for i in range(3)]
    retried = ctx.rpc(flaky, key, 1)
    total = sum([await s for s in squares])
    try:
        await ctx.rpc(broken, "out of stock")
        failed = None
    except Exception as error:
        failed = str(error)
    return {"total": total, "retried": await retried, "failed": failed}


FUNCTIONS = [greet, once, square, fan_out, chain, stamp, napper, announce, approval, step, steps, tick]
FUNCTIONS += [parent_of_detached, slow_square, pipeline]


def register(resonate: Resonate) -> Resonate:
    for function in FUNCTIONS:
        resonate.register(function)
    resonate.register(flaky, retry_policy=Constant(delay=0, max_retries=5))
    resonate.register(broken, retry_policy=Never())
    return resonate


def read_journal():
    path = os.environ.get("SDK_JOURNAL")
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


async def work(url, group, ttl):
    resonate = register(Resonate(url=url, group=group, ttl=timedelta(seconds=ttl)))
    journal("worker-ready", group)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await resonate.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A Resonate Python SDK worker")
    parser.add_argument("url")
    parser.add_argument("group")
    parser.add_argument("--ttl", type=float, default=60, help="task lease, seconds")
    arguments = parser.parse_args()
    asyncio.run(work(arguments.url, arguments.group, arguments.ttl))
