"""Real server processes for end-to-end tests: the embedded server, and production's pieces."""

import contextlib
import os
import queue
import re
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


def attempts(database_url, kind, subject):
    """How many attempts a server has made to deliver the message of this kind about this task or promise, read
    from its database."""
    import sqlite3

    import psycopg

    query = "SELECT attempts FROM outbox_message WHERE kind = %s AND subject = %s"
    if database_url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(database_url.removeprefix("sqlite:///"))) as connection:
            return connection.execute(query.replace("%s", "?"), [kind, subject]).fetchone()[0]
    with psycopg.connect(database_url) as connection:
        return connection.execute(query, [kind, subject]).fetchone()[0]


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
        """SIGTERM to the process alone, as a supervisor stops it: it stops its own children (a Celery worker's pool
        finishes its tasks; signalled too, they would die mid-task, with a traceback). Whatever of its group is left
        after 20 s is killed."""
        if self.popen.poll() is None:
            self.popen.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)
        self.log.close()


def server_processes(serve_pid):
    """The uvicorn processes of a `serve --workers N`: its children, but multiprocessing's resource tracker."""
    children = Path(f"/proc/{serve_pid}/task/{serve_pid}/children").read_text().split()
    return [int(pid) for pid in children if b"spawn_main" in cmdline(pid)]


def cmdline(pid):
    """A process's command line; empty for one gone (reaped since its parent listed it)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def eventually(check, timeout=20):
    """check()'s first result that is not None, asked every 0.2 s; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (found := check()) is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s")


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


SERVER_ERROR = re.compile(
    r"resonate\.request \S+ \S+ (5\d\d) [\d.]+ ms|\"logger\": \"resonate\.request\".*\"status\": (5\d\d)"
)
BUSY = "503"  # a lost race or a database out of reach, answered as such: the client retries


def log_problems(paths):
    """Every line of these log files (or of the *.log files under these directories) that shows a traceback or a
    request answered with a 5xx other than 503, as "file:line: text"."""
    found = []
    for path in paths:
        path = Path(path)
        for log in sorted(path.rglob("*.log")) if path.is_dir() else [path]:
            for number, line in enumerate(log.read_text(errors="replace").splitlines(), 1):
                error = SERVER_ERROR.search(line)
                if "Traceback" in line or (error and BUSY not in error.groups()):
                    found.append(f"{log.name}:{number}: {line.strip()}")
    return found


def assert_clean_logs(*paths):
    """No traceback and no 500 in any log of the processes a test ran (issue 26: every 500 is a defect to find)."""
    problems = log_problems(paths)
    assert not problems, "server logs show errors:\n" + "\n".join(problems[:40])


def run_invariants(database_url):
    """`manage.py invariants` over the database a run used: it must find nothing."""
    done = subprocess.run(
        [runtime_python(), "manage.py", "invariants"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"manage.py invariants failed:\n{done.stdout}\n{done.stderr}"
