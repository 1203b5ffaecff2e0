"""A rolling restart (`bin/production restart`) under load from both released SDKs: Python and TypeScript workers
in one group, a Python client and TypeScript clients invoking throughout. The server processes are replaced one at
a time, then the Celery worker, then Beat: no invocation may fail, and the SDKs' own retries absorb what the
restart costs clients (counted from the servers' logs: answers of 500 and above while it ran)."""

import asyncio
import os
import re
import subprocess
import threading
import time
import uuid

import pytest

from tests.chaos.conftest import Deployment
from tests.e2e.sdk.conftest import Journal, NodeProcess, client, run, run_node
from tests.e2e.servers import ROOT, Process, assert_clean_logs
from tests.faults import run_deployment

pytestmark = [pytest.mark.beside_sqlite, pytest.mark.chaos, pytest.mark.sdk]

INVOCATIONS = 120  # by the Python client, one every 50 ms, across the restart
TS_CLIENTS = 6  # `hello` runs by TypeScript clients, one after the other, across the restart


def test_a_rolling_restart_under_both_sdks_fails_no_invocation(tmp_path, monkeypatch):
    journal = Journal(tmp_path / "journal.jsonl")
    monkeypatch.setenv("SDK_JOURNAL", str(journal.path))
    group = f"rolling-{uuid.uuid4().hex[:8]}"
    workers, restarted, ts_answers = [], {}, []
    for running in run_deployment(Deployment(tmp_path / "deployment")):
        try:
            env = {**os.environ, "SDK_JOURNAL": str(journal.path)}
            for n in range(2):
                args = ["-m", "tests.e2e.sdk.py_app", running.url, group, "--ttl", "10"]
                workers.append(Process(args, env, tmp_path / f"python-worker-{n}.log"))
            workers.append(NodeProcess(["worker", running.url, group], env, tmp_path / "typescript-worker.log"))
            journal.wait("worker-ready", group, count=3, timeout=60)
            time.sleep(0.5)
            marks = running.log_marks()
            threads = [
                threading.Thread(target=restart, args=(running, restarted)),
                threading.Thread(target=typescript_clients, args=(running.url, group, ts_answers)),
            ]
            for thread in threads:
                thread.start()
            squares = run(python_client(running.url, group), timeout=240)
            for thread in threads:
                thread.join(240)
            errors = answers_of_500_and_above(running.logs_since(marks, lines=100_000))
            assert_clean_logs(*running.logs())
        finally:
            for worker in workers:
                worker.stop()
    assert restarted["done"].returncode == 0, restarted["done"].stdout + restarted["done"].stderr
    assert squares == [i * i for i in range(INVOCATIONS)]
    assert ts_answers == [{"run": "hello run", "rpc": "hello rpc"}] * TS_CLIENTS
    print(
        f"\nrolling restart under both SDKs: {restarted['seconds']:.1f} s, {INVOCATIONS} Python and {TS_CLIENTS}"
        f" TypeScript invocations, 0 failed; answers of 500 and above the SDKs retried: {errors}"
    )


def restart(running, restarted):
    time.sleep(1)  # invocations under way first
    started = time.monotonic()
    done = subprocess.run(["bin/production", "restart"], cwd=ROOT, env=running.env, capture_output=True, text=True)
    restarted.update(done=done, seconds=time.monotonic() - started)


def typescript_clients(url, group, answers):
    for n in range(TS_CLIENTS):
        answers.append(run_node(["hello", url, group, f"{group}-ts-{n}"], timeout=120))
        time.sleep(1)


async def python_client(url, group):
    async with client(url, group) as resonate:
        target = resonate.options(target=group)
        handles = []
        for i in range(INVOCATIONS):
            handles.append(target.rpc(f"{group}-py-{i}", "square", i))
            await asyncio.sleep(0.05)
        return await asyncio.gather(*(handle.result() for handle in handles))


def answers_of_500_and_above(logs):
    return len(re.findall(r"resonate\.request \S+ \S+ 5\d\d ", logs))
