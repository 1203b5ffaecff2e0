"""Fixtures: a protocol client that speaks POST / envelopes, with debug operations enabled."""

import contextlib
import subprocess
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
import pytest

VERSION = "2026-04-01"


class Answer(NamedTuple):
    status: int  # head.status (the test also checks it equals the HTTP status)
    data: Any
    envelope: dict


class Protocol:
    """Sends one envelope to POST / through Django's test client and checks the envelope invariants (a subclass
    sends it elsewhere: tests/e2e/test_live_conformance.py, to real server processes)."""

    def __init__(self, client):
        self.client = client
        self.sent = 0

    def __call__(self, kind, data, now=None, head=None):
        self.sent += 1
        head = {"corrId": f"c{self.sent}", "version": VERSION, **(head or {})}
        if now is not None:
            head["resonate:debug_time"] = now
        return self.raw(orjson.dumps({"kind": kind, "head": head, "data": data}), kind, head["corrId"])

    def raw(self, body, kind=None, corr_id=None):
        status, content_type, content = self.post(body)
        envelope = orjson.loads(content)
        assert content_type == "application/json"
        assert envelope["head"]["status"] == status
        assert envelope["head"]["version"] == VERSION
        if kind is not None:
            assert envelope["kind"] == kind
            assert envelope["head"]["corrId"] == corr_id
        if status >= 400:
            assert isinstance(envelope["data"], str), envelope
        assert_no_nulls(envelope)
        return Answer(status, envelope["data"], envelope)

    def post(self, body):
        """(HTTP status, Content-Type, body) of POST / with this body."""
        response = self.client.post("/", body, content_type="application/json")
        return response.status_code, response["Content-Type"], response.content

    def snap(self):
        answer = self("debug.snap", {})
        assert answer.status == 200
        return answer.data

    def tick(self, time):
        answer = self("debug.tick", {"time": time})
        assert answer.status == 200 and answer.data == []


def assert_no_nulls(value, path="$"):
    """Optional fields are omitted, never null (decision D2)."""
    assert value is not None, f"null at {path}"
    if isinstance(value, dict):
        for key, inner in value.items():
            assert_no_nulls(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for n, inner in enumerate(value):
            assert_no_nulls(inner, f"{path}[{n}]")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, and at the end of the run on PostgreSQL, before it is dropped, the sessions
    that threads of this process left open on it (servers and deliverers some tests run in-process) ended: with
    them, DROP DATABASE waited 5 s for them to go, then failed, and the run ended with a warning."""
    yield
    from django.db import connection

    if connection.vendor == "postgresql":
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


@pytest.fixture(autouse=True)
def debug_enabled(settings):
    settings.RESONATE = {**settings.RESONATE, "DEBUG": True}


@pytest.fixture
def protocol(db, client):
    return Protocol(client)


# Shorthands for building requests.
TARGET = "poll://any@default"


def create(id, timeout_at=10_000, tags=None, param=None):
    data = {"id": id, "timeoutAt": timeout_at, "tags": tags or {}}
    if param is not None:
        data["param"] = param
    return data


def action(kind, data):
    return {"kind": kind, "head": {"corrId": "inner", "version": VERSION}, "data": data}


def targeted(id, timeout_at=10_000, tags=None, param=None):
    """promise.create data for a promise with a task (resonate:target)."""
    return create(id, timeout_at, tags={"resonate:target": TARGET, **(tags or {})}, param=param)


def execute(id, version, address=TARGET):
    """An execute message as debug.snap lists it."""
    return {
        "address": address,
        "message": {"kind": "execute", "head": {}, "data": {"task": {"id": id, "version": version}}},
    }


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow (minutes each)")


def pytest_collection_modifyitems(config, items):
    """Deselected (never skipped): tests marked slow unless --slow is given, tests marked postgres or beside_postgres
    in the SQLite pass and tests marked sqlite or beside_sqlite in the PostgreSQL pass (bin/test runs its two lanes
    side by side: beside_sqlite and beside_postgres balance their times)."""
    from django.db import connection

    def left_out(item):
        if item.get_closest_marker("slow") and not config.getoption("--slow"):
            return True
        in_sqlite_pass = item.get_closest_marker("sqlite") or item.get_closest_marker("beside_sqlite")
        if in_sqlite_pass and connection.vendor != "sqlite":
            return True
        in_postgres_pass = item.get_closest_marker("postgres") or item.get_closest_marker("beside_postgres")
        return bool(in_postgres_pass) and connection.vendor != "postgresql"

    deselected = [item for item in items if left_out(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not left_out(item)]


def pytest_terminal_summary(terminalreporter):
    """The figures the SDK scenarios recorded, also appended to var/sdk-timings.jsonl."""
    from tests.e2e.sdk.conftest import TIMINGS
    from tests.e2e.servers import ROOT

    if not TIMINGS:
        return
    terminalreporter.section("released SDKs against this server: figures")
    out = ROOT / "var" / "sdk-timings.jsonl"
    out.parent.mkdir(exist_ok=True)
    run = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit(ROOT)}
    with open(out, "a") as f:
        for mode, scenario, figure, value, unit in TIMINGS:
            terminalreporter.write_line(f"{mode:<10} {scenario:<34} {figure:<16} {value:>10.1f} {unit}")
            figures = {"mode": mode, "scenario": scenario, "figure": figure, "value": round(value, 1), "unit": unit}
            f.write(orjson.dumps({**run, **figures}).decode() + "\n")


def commit(root):
    """The checked-out commit, with "+" when the tree has changes; "unknown" outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
    except OSError:
        return "unknown"
    return (head.stdout.strip() or "unknown") + ("+" if dirty.stdout.strip() else "")


@pytest.fixture
def own_redis(tmp_path):
    """A Redis of this test's own (never the machine's), to kill and pause."""
    from tests.faults import OwnRedis

    redis = OwnRedis(tmp_path).start()
    yield redis
    redis.stop()


@pytest.fixture
def pg_proxy(tmp_path):
    """A TCP proxy in front of the machine's PostgreSQL, to cut, refuse and slow connections."""
    from tests.faults import PgProxy

    proxy = PgProxy(tmp_path)
    yield proxy
    proxy.stop()


@contextlib.contextmanager
def guarded_uvicorn(app):
    """uvicorn serving `app` with the server's own HTTP protocol (resonate_site.serving.GuardedHttpProtocol), on a
    thread and a free port of 127.0.0.1: the port, once it listens."""
    import socket
    import threading
    import time

    import uvicorn

    from resonate_site.serving import GuardedHttpProtocol

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    class WithoutAccessLog(GuardedHttpProtocol):
        """As serve runs it (access_log=False), which answers POST / directly. Here uvicorn would find an access log:
        pytest attaches its log capture to every logger that does not propagate, uvicorn.access among them."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.access_log = False

    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=WithoutAccessLog, log_level="error", lifespan="off", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
