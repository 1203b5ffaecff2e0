"""Load from both released SDKs, for the tests of losing a machine: Python and TypeScript workers in one group, a
Python client and TypeScript clients invoking while something happens to the deployment (`during`)."""

import asyncio
import os
import re
import threading
import time
from dataclasses import dataclass, field

from tests.e2e.sdk.conftest import Journal, NodeProcess, client, run, run_node
from tests.e2e.servers import Process

INVOCATIONS = 120  # by the Python client, one every 50 ms
TS_CLIENTS = 6  # `hello` runs by TypeScript clients, one after the other, a second apart


@dataclass
class Outcome:
    squares: list  # the Python client's results, in order
    hellos: list  # the TypeScript clients' answers
    seconds: float  # how long `during` took
    errors: list = field(default_factory=list)  # what `during` or a client raised
    result: object = None  # what the action returned

    def failed(self):
        """The invocations that did not return what the application computes."""
        wrong = [i for i, square in enumerate(self.squares) if square != i * i]
        missing = list(range(len(self.squares), INVOCATIONS))
        bad_hellos = [answer for answer in self.hellos if answer != {"run": "hello run", "rpc": "hello rpc"}]
        return wrong + missing + bad_hellos + list(range(len(self.hellos), TS_CLIENTS))


class SdkLoad:
    def __init__(self, url, group, directory):
        self.url, self.group, self.directory = url, group, directory
        self.journal = Journal(directory / "journal.jsonl")
        self.workers = []

    def __enter__(self):
        os.environ["SDK_JOURNAL"] = str(self.journal.path)  # the Python client, in this process, journals too
        env = {**os.environ, "SDK_JOURNAL": str(self.journal.path)}
        for n in range(2):
            args = ["-m", "tests.e2e.sdk.py_app", self.url, self.group, "--ttl", "10"]
            self.workers.append(Process(args, env, self.directory / f"python-worker-{n}.log"))
        self.workers.append(NodeProcess(["worker", self.url, self.group], env, self.directory / "ts-worker.log"))
        self.journal.wait("worker-ready", self.group, count=3, timeout=60)
        time.sleep(0.5)  # the SDKs open their streams in the background
        return self

    def __exit__(self, *exc):
        for worker in self.workers:
            worker.stop()
        os.environ.pop("SDK_JOURNAL", None)

    def during(self, action, delay_s=1.0):
        """Invoke from both SDKs while action() runs (it starts `delay_s` after the first invocation)."""
        outcome = Outcome([], [], 0.0)

        def act():
            time.sleep(delay_s)
            started = time.monotonic()
            try:
                outcome.result = action()
            except Exception as error:
                outcome.errors.append(repr(error))
            outcome.seconds = time.monotonic() - started

        def typescript():
            for n in range(TS_CLIENTS):
                try:
                    outcome.hellos.append(run_node(["hello", self.url, self.group, f"{self.group}-ts-{n}"], 120))
                except Exception as error:
                    outcome.errors.append(repr(error))
                time.sleep(1)

        threads = [threading.Thread(target=act), threading.Thread(target=typescript)]
        for thread in threads:
            thread.start()
        try:
            outcome.squares = run(self.python_client(), timeout=240)
        except Exception as error:
            outcome.errors.append(repr(error))
        for thread in threads:
            thread.join(240)
        return outcome

    async def python_client(self):
        async with client(self.url, self.group) as resonate:
            target = resonate.options(target=self.group)
            handles = []
            for i in range(INVOCATIONS):
                handles.append(target.rpc(f"{self.group}-py-{i}", "square", i))
                await asyncio.sleep(0.05)
            return await asyncio.gather(*(handle.result() for handle in handles))


def answers_of_500_and_above(logs):
    """The server's answers of 500 and above in these log lines (the SDKs retry them)."""
    return len(re.findall(r"resonate\.request \S+ \S+ 5\d\d ", logs))
