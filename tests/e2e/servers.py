"""Real server processes for end-to-end tests: the embedded server, and production's pieces."""

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[2]


def now_ms():
    return time.time_ns() // 1_000_000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runtime_python():
    """The interpreter the server, Celery and Beat run on: RESONATE_RUNTIME_PYTHON (bin/test sets a venv built from
    requirements.txt alone, as users install it), else this one."""
    return os.environ.get("RESONATE_RUNTIME_PYTHON") or sys.executable


class Process:
    """A Python child process whose output goes to a log file, stopped (and waited for) on close."""

    def __init__(self, args, env, log, python=sys.executable):
        self.log = open(log, "w")  # noqa: SIM115 (closed in stop)
        self.popen = subprocess.Popen(
            [python, *args],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, signal_number=signal.SIGTERM):
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal_number)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)

    def stop(self):
        self.kill()
        self.log.close()


def wait_ready(url, process, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise RuntimeError(f"server exited with {process.popen.returncode}; see {process.log.name}")
        try:
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server not ready after {timeout} s; see {process.log.name}")


class Client:
    """POST / envelopes to a running server."""

    def __init__(self, url, token=None):
        self.url, self.token = url, token
        self.http = httpx.Client(base_url=url, timeout=30)
        self.sent = 0

    def __call__(self, kind, data):
        self.sent += 1
        head = {"corrId": f"e2e-{self.sent}", "version": "2026-04-01"}
        if self.token is not None:
            head["auth"] = self.token
        response = self.http.post("/", content=orjson.dumps({"kind": kind, "head": head, "data": data}))
        envelope = response.json()
        assert envelope["head"]["status"] == response.status_code < 500, envelope
        return response.status_code, envelope["data"]


class Listener:
    """An SSE client on GET /poll/{group}/{id}: events arrive on a queue, reconnecting when a stream ends."""

    def __init__(self, url, group, id):
        self.url, self.group, self.id = url, group, id
        self.events = queue.Queue()
        self.connects = 0
        self.connected = threading.Event()
        self.closing = False
        threading.Thread(target=self.run, daemon=True).start()
        assert self.connected.wait(10), "stream did not open"

    def run(self):
        with httpx.Client(timeout=httpx.Timeout(5, read=60)) as http:
            while not self.closing:
                try:
                    self.read(http)
                except httpx.HTTPError:
                    time.sleep(0.2)

    def read(self, http):
        with http.stream("GET", f"{self.url}/poll/{self.group}/{self.id}") as response:
            assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
            self.connects += 1
            buffer = b""
            for chunk in response.iter_bytes():
                self.connected.set()
                buffer += chunk
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    assert b"\r" not in event
                    lines = event.decode("ascii").split("\n")
                    data = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
                    assert len(data) <= 1, "one data line per event"
                    if data:
                        self.events.put(orjson.loads(data[0]))
                if self.closing:
                    return

    def next(self, timeout=15, kind=None, match=lambda event: True):
        """The next event of `kind` for which `match` holds, skipping others, within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                break
            if (kind is None or event["kind"] == kind) and match(event):
                event["received_at"] = now_ms()
                return event
        raise AssertionError(f"no matching {kind or 'event'} on {self.group}/{self.id} within {timeout} s")

    def drain(self):
        """Everything received so far."""
        events = []
        while not self.events.empty():
            events.append(self.events.get_nowait())
        return events

    def close(self):
        self.closing = True
