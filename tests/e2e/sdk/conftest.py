"""Fixtures for the released SDKs: a deployment of this server, SDK worker processes, a journal, timings.

The deployment is the embedded mode in the SQLite pass of the suite and the production mode (two
server processes, a Celery worker, Celery Beat, Redis) in the PostgreSQL pass. Workers connect to
one server process and clients to another, so in production every message crosses processes.
"""

import asyncio
import json
import os
import shutil
import subprocess
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

from tests.e2e.servers import Process

TS_APP = Path(__file__).parent / "ts"
TIMINGS = []  # (mode, scenario, figure, value, unit) of this run, printed at the end


@dataclass
class Deployment:
    mode: str  # "embedded" or "production"
    worker_url: str  # the server process workers connect to
    client_url: str  # the one clients connect to (another process in production)
    processes: list = field(default_factory=list)


@pytest.fixture(scope="module")
def deployment(request):
    if "sqlite" in settings.DATABASES["default"]["ENGINE"]:
        server = request.getfixturevalue("embedded")
        return Deployment("embedded", server.url, server.url)
    cluster = request.getfixturevalue("production")
    return Deployment("production", cluster.servers[0].url, cluster.servers[1].url)


@pytest.fixture
def group(request):
    """A worker group of this test's own, so tests sharing a deployment never take each other's work."""
    return f"{request.node.name[5:30].replace('_', '-')}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def journal(tmp_path, monkeypatch):
    """The file SDK functions append their events to, in workers and in this process's clients."""
    path = tmp_path / "journal.jsonl"
    monkeypatch.setenv("SDK_JOURNAL", str(path))
    return Journal(path)


class Journal:
    def __init__(self, path):
        self.path = path

    def events(self, event=None, key=None):
        if not self.path.exists():
            return []
        with open(self.path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        return [e for e in lines if (event is None or e["event"] == event) and (key is None or e["key"] == key)]

    def wait(self, event, key, count=1, timeout=30):
        """The events once at least `count` of them are there."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(found := self.events(event, key)) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{count} × {event} {key} not journaled within {timeout} s: {self.events()}")


@pytest.fixture
def workers(deployment, journal, tmp_path):
    """Starts SDK worker processes (Python or TypeScript) of a group; stops them after the test."""
    started = []

    def start(group, n=1, ttl=60, language="python", env=None):
        ready = len(journal.events("worker-ready", group))
        new = []
        for _ in range(n):
            environment = {**os.environ, "SDK_JOURNAL": str(journal.path), **(env or {})}
            log = tmp_path / f"worker-{language}-{len(started)}.log"
            if language == "python":
                args = ["-m", "tests.e2e.sdk.py_app", deployment.worker_url, group, "--ttl", str(ttl)]
                process = Process(args, environment, log)
            else:
                process = NodeProcess(["worker", deployment.worker_url, group], environment, log)
            started.append(process)
            new.append(process)
        journal.wait("worker-ready", group, count=ready + n)
        time.sleep(0.5)  # the SDK opens its SSE stream in the background; an early execute is re-sent anyway
        return new

    yield start
    for process in started:
        process.stop()


def node():
    """The Node.js command line: the TypeScript SDK wants Node 22; on Node 20 a polyfill is preloaded."""
    executable = shutil.which("node")
    if executable is None:
        raise RuntimeError("Node.js is not installed; bin/setup test needs it for tests/e2e/sdk")
    if not (TS_APP / "node_modules" / "@resonatehq" / "sdk").exists():
        raise RuntimeError("the TypeScript SDK is not installed; run bin/setup test")
    return [executable, "--import", str(TS_APP / "polyfill.mjs"), str(TS_APP / "app.mjs")]


class NodeProcess(Process):
    """A process of the TypeScript application (tests/e2e/sdk/ts/app.mjs)."""

    def __init__(self, args, env, log):
        self.log = open(log, "w")  # noqa: SIM115 (closed in stop)
        self.popen = subprocess.Popen(
            [*node(), *args], cwd=TS_APP, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )


def run_node(args, timeout=60):
    """Runs a TypeScript client scenario to completion; its last stdout line is its JSON answer."""
    done = subprocess.run([*node(), *args], cwd=TS_APP, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"node {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(coroutine, timeout=60):
    """Runs an SDK client coroutine in a fresh event loop, failing the test if it takes over `timeout` s."""
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


@asynccontextmanager
async def client(url, group, **options):
    """A Python SDK client, with the application's functions registered, as `run` needs them."""
    from resonate.resonate import Resonate

    from tests.e2e.sdk import py_app

    resonate = py_app.register(Resonate(url=url, group=f"{group}-client", **options))
    try:
        yield resonate
    finally:
        await resonate.stop()


def record(deployment, scenario, figure, value, unit):
    """Keeps a figure for the summary at the end of the run (tests/conftest.py prints it)."""
    TIMINGS.append((deployment.mode, scenario, figure, value, unit))
