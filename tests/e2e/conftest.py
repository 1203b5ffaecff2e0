"""Fixtures that start real servers: each test gets fresh processes and a fresh database."""

import os
import subprocess
import uuid
from dataclasses import dataclass

import dj_database_url
import psycopg
import pytest
from django.conf import settings

from tests.e2e.servers import ROOT, Process, assert_clean_logs, eventually, free_port, runtime_python, wait_ready


@dataclass
class Server:
    url: str
    process: Process
    env: dict


@pytest.fixture(scope="module")
def database_url(tmp_path_factory):
    """A new, migrated database of the backend this test run uses."""
    engine = settings.DATABASES["default"]["ENGINE"]
    if "sqlite" in engine:
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'e2e.sqlite3'}"
        migrate(url)
        yield url
        return
    yield from new_postgres_database(os.environ["DATABASE_URL"])


def new_postgres_database(server_url):
    """Yield the URL of a new, migrated database on the PostgreSQL server of `server_url`; drop it afterwards."""
    name = f"resonate_e2e_{uuid.uuid4().hex[:12]}"
    admin = dj_database_url.parse(server_url)
    dsn = f"host={admin['HOST']} port={admin['PORT']} user={admin['USER']} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url = f"postgres://{admin['USER']}@{admin['HOST']}:{admin['PORT']}/{name}"
    migrate(url)
    yield url
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate(url):
    subprocess.run(
        [runtime_python(), "manage.py", "migrate", "-v", "0"],
        cwd=ROOT,
        check=True,
        env={**os.environ, "DATABASE_URL": url},
    )


FAST = {  # short timers so the tests run in seconds
    "RESONATE_RETRY_TIMEOUT_MS": "1000",
    "RESONATE_SSE_MAX_AGE_MS": "4000",
    "RESONATE_SSE_KEEPALIVE_MS": "1000",
    "RESONATE_DELIVERY_BACKOFF_MS": "200",
    "RESONATE_DELIVERY_PASS_MS": "200",
}


def embedded_env(database_url, server_settings=FAST):
    """The environment of an embedded server on this database."""
    return {
        **os.environ,
        **server_settings,
        "DATABASE_URL": database_url,
        "RESONATE_BACKGROUND": "embedded",
        "RESONATE_HUB_URL": "",
        "RESONATE_DEBUG": "false",
    }


def production_env(database_url, redis_url, server_settings=FAST, **more):
    """The environment of production mode's processes (server, Celery worker and Beat) on this database and Redis."""
    return {
        **os.environ,
        **server_settings,
        "DATABASE_URL": database_url,
        "RESONATE_BACKGROUND": "celery",
        "RESONATE_HUB_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        **more,
    }


def start_embedded(env, log):
    port = free_port()
    process = Process(
        ["manage.py", "serve", "--port", str(port), "--log-level", "warning"], env, log, python=runtime_python()
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, process)
    return Server(url, process, env)


@pytest.fixture(scope="module")
def server_settings():
    """RESONATE_* settings of the servers a module starts; a module overrides this fixture to change them."""
    return FAST


@pytest.fixture(scope="module")
def embedded(database_url, server_settings, tmp_path_factory):
    """`manage.py serve` in its embedded mode: one process that serves, sweeps and delivers."""
    logs = tmp_path_factory.mktemp("logs")
    server = start_embedded(embedded_env(database_url, server_settings), logs / "server.log")
    yield server
    server.process.stop()
    assert_clean_logs(logs)  # no 500 and no traceback, whatever the module's tests did


@pytest.fixture
def unique(request):
    """A prefix for this test's ids and worker groups, so tests can share one server."""
    return f"{request.node.name[5:40]}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def production(database_url, server_settings, tmp_path_factory):
    """Production mode: two server processes, a Celery worker and Celery Beat, PostgreSQL and Redis."""
    import redis

    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        raise RuntimeError("production mode runs on PostgreSQL: mark the test postgres")
    redis_db = 7
    redis.Redis(db=redis_db).flushdb()
    env = {
        **os.environ,
        **server_settings,
        "DATABASE_URL": database_url,
        "RESONATE_BACKGROUND": "celery",
        "RESONATE_HUB_URL": f"redis://127.0.0.1:6379/{redis_db}",
        "CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{redis_db}",
        "RESONATE_SWEEP_PERIOD_MS": "1000",
        # Production refuses to start without auth; these tests run it with a key only where they configure one.
        "RESONATE_AUTH_DISABLED": "false" if "RESONATE_AUTH_PUBLIC_KEY_FILE" in server_settings else "true",
        "RESONATE_PUSH_TIMEOUT_MS": "2000",
        "RESONATE_DEBUG": "false",
    }
    logs = tmp_path_factory.mktemp("production")
    cluster = Cluster(env, logs)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
    assert_clean_logs(logs)  # no 500 and no traceback in any server, worker or Beat log


class Cluster:
    """The processes of a production deployment, each startable and killable on its own."""

    def __init__(self, env, logs):
        self.env, self.logs = env, logs
        self.servers, self.worker, self.beat = [], None, None

    def start(self):
        for n in range(2):
            port = free_port()
            process = Process(
                ["manage.py", "serve", "--port", str(port), "--log-level", "warning"],
                self.env,
                self.logs / f"server-{n}.log",
                python=runtime_python(),
            )
            self.servers.append(Server(f"http://127.0.0.1:{port}", process, self.env))
        for server in self.servers:
            wait_ready(server.url, server.process)
        self.start_worker()
        self.beat = Process(
            [
                "-m",
                "celery",
                "-A",
                "resonate_site",
                "beat",
                "--loglevel",
                "warning",
                "--schedule",
                str(self.logs / "beat-schedule"),
            ],
            self.env,
            self.logs / "beat.log",
            python=runtime_python(),
        )
        self.wait_until_sweeping()

    def wait_until_sweeping(self, timeout=60):
        """Wait until a timeout fires: Beat has started and ticked, and the worker sweeps. Both come up after the
        servers answer (1-2 s on a quiet VM, more on a slow one): a test that set a 2 s timer as the cluster came up
        measured their start-up, not the sweep (CI, 2026-12-07: 2.0-2.8 s late)."""
        with psycopg.connect(self.env["DATABASE_URL"], autocommit=True) as connection:
            if connection.execute("SELECT 1 FROM outbox_pause WHERE id = 1 AND paused").fetchone():
                raise RuntimeError("background work is paused in this database (debug.start): no timeout fires")
            probe = f"cluster-ready-{uuid.uuid4().hex[:8]}"
            timer = ["--timeout", "300ms", "--tags", '{"resonate:timer": "true"}']
            create = [runtime_python(), "manage.py", "promises", "create", probe, *timer]
            subprocess.run(create, cwd=ROOT, env=self.env, check=True, capture_output=True)
            query = "SELECT state FROM promises_promise WHERE id = %s"
            try:
                eventually(lambda: connection.execute(query, [probe]).fetchone()[0] != "pending" or None, timeout)
            except AssertionError:
                message = f"no timeout fired {timeout} s after production mode started; see {self.logs}"
                raise RuntimeError(message) from None

    def start_worker(self):
        level = os.environ.get("CELERY_LOG_LEVEL", "warning")
        self.worker = Process(
            [
                "-m",
                "celery",
                "-A",
                "resonate_site",
                "worker",
                "--concurrency",
                "4",
                "--loglevel",
                level,
                "--without-gossip",
                "--without-mingle",
            ],
            self.env,
            self.logs / f"worker-{len(list(self.logs.glob('worker-*')))}.log",
            python=runtime_python(),
        )

    def stop(self):
        for process in [self.beat, self.worker, *(s.process for s in self.servers)]:
            if process is not None:
                process.stop()


@pytest.fixture(scope="module")
def otlp_receiver():
    """A local OpenTelemetry collector (tests/e2e/otlp.py) for a module's servers to send their traces to."""
    from tests.e2e.otlp import Receiver

    found = Receiver()
    yield found
    found.server.shutdown()
