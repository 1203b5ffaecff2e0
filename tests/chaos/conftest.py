"""Production mode as users run it (bin/production: supervisord, `serve` with two server processes, a Celery worker,
Beat), on a Redis of its own and behind a TCP proxy to PostgreSQL, so that tests can break every part of it."""

import json
import logging
import os
import signal
import subprocess
import time
import uuid
import xmlrpc.client
from pathlib import Path

import dj_database_url
import httpx
import psycopg
import pytest

from tests.e2e.conftest import database_url  # noqa: F401 (a fixture: a fresh, migrated database)
from tests.e2e.servers import runtime_python
from tests.faults import ROOT, OwnRedis, PgProxy, free_port, postgres_server_url, run_deployment

logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request of the load otherwise

RESULTS = []  # one row per fault, printed at the end of the run and appended to var/chaos.jsonl

# CHAOS_LONG=1 runs each fault under longer and heavier load (by hand; CI runs the bounded form).
LONG = os.environ.get("CHAOS_LONG", "") not in ("", "0")

SETTINGS = {
    "RESONATE_RETRY_TIMEOUT_MS": "2000",  # a lost execute is sent again after this
    "RESONATE_SSE_MAX_AGE_MS": "30000",  # streams end and reconnect during the run (every 120 s in production)
    "RESONATE_SSE_KEEPALIVE_MS": "5000",
    "RESONATE_READ_TIMEOUT_MS": "3000",
}


class Deployment:
    """bin/production on a database of its own: by default on the machine's PostgreSQL behind a PgProxy (`proxy`);
    on a PgCluster's when given one (`served_url` and `direct_url` then name the database as the processes and the
    checks reach it). Its hub and broker: a Redis of its own, or the one given (an OwnSentinel). `restore`: a pg_dump
    archive the new database is restored from (then migrated, as an upgrade would)."""

    def __init__(self, directory, cluster=None, served_url=None, redis=None, port=None, restore=None):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.restore = restore  # a pg_dump archive (-Fc) the new database is restored from before it is migrated
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.redis = redis or OwnRedis(self.directory).start()  # or an OwnSentinel's primary, replica and sentinels
        self.database = f"resonate_chaos_{uuid.uuid4().hex[:10]}"
        self.cluster = cluster
        if cluster is None:
            self.proxy = PgProxy(self.directory)
            admin = dj_database_url.parse(postgres_server_url())
            self.admin_dsn = f"host={admin['HOST']} port={admin['PORT']} user={admin['USER']} dbname=postgres"
            self.direct_url = f"postgres://{admin['USER']}@{admin['HOST']}:{admin['PORT']}/{self.database}"
            served_url = self.proxy.url(self.database, admin["USER"])
        else:
            self.proxy = None
            self.direct_url = cluster.multi_host_url(self.database)
            served_url = served_url(self.database)
        python = runtime_python()
        self.env = {
            **os.environ,
            **SETTINGS,
            "DATABASE_URL": served_url,
            "RESONATE_HUB_URL": self.redis.url,
            "CELERY_BROKER_URL": self.redis.url,
            "RESONATE_AUTH_DISABLED": "true",
            "RESONATE_DEBUG": "false",
            "RESONATE_PYTHON": python,
            "RESONATE_RUN_DIR": str(self.directory / "run"),
            "RESONATE_PORT": str(self.port),
            "RESONATE_SERVER_PROCESSES": "2",
            "RESONATE_CELERY_CONCURRENCY": "4",
            "PATH": f"{Path(python).parent}:{os.environ['PATH']}",
        }
        self.supervisord = None

    def start(self):
        if self.cluster is None:
            with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
                connection.execute(f'CREATE DATABASE "{self.database}"')
        else:
            self.cluster.create_database(self.database)
        if self.restore is not None:
            subprocess.run(["pg_restore", "--no-owner", "-d", self.direct_url, str(self.restore)], check=True)
        self.manage("migrate", "-v", "0")
        self.log = open(self.directory / "bin-production.log", "w")  # noqa: SIM115 (closed in stop)
        self.supervisord = subprocess.Popen(
            ["bin/production"], cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.wait_until_serving(60)
        self.control = xmlrpc.client.ServerProxy(
            "http://127.0.0.1", transport=_unix_transport(self.directory / "run" / "supervisor.sock")
        )

    def manage(self, *args):
        env = {**self.env, "DATABASE_URL": self.direct_url}
        return subprocess.run(
            [runtime_python(), "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
        )

    def wait_until_serving(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.supervisord.poll() is not None:
                raise RuntimeError(f"bin/production exited; see {self.log.name}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"production mode not ready after {timeout} s; see {self.directory}")

    # processes

    def pid(self, program):
        return self.control.supervisor.getProcessInfo(program)["pid"]

    def states(self):
        return {info["name"]: info["statename"] for info in self.control.supervisor.getAllProcessInfo()}

    @staticmethod
    def children(pid):
        path = Path(f"/proc/{pid}/task/{pid}/children")
        return [int(child) for child in path.read_text().split()] if path.exists() else []

    def server_processes(self):
        """serve's uvicorn worker processes (not multiprocessing's resource tracker)."""
        return [
            child
            for child in self.children(self.pid("server"))
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
        ]

    @staticmethod
    def kill(pid):
        os.kill(pid, signal.SIGKILL)

    def log_marks(self):
        """Where each log of the deployment ends now: logs_since() shows what was written after."""
        return {path: path.stat().st_size for path in self.logs()}

    def logs_since(self, marks, lines=80):
        """The last `lines` lines each log has gained since log_marks(), for a failure's message."""
        shown = []
        for path in self.logs():
            with open(path, "rb") as log:
                log.seek(marks.get(path, 0))
                tail = log.read().decode(errors="replace").splitlines()[-lines:]
            shown.append(f"--- {path.name}, its last {len(tail)} lines since the fault began ---\n" + "\n".join(tail))
        return "\n".join(shown)

    def logs(self):
        return sorted([self.directory / "bin-production.log", *(self.directory / "run").glob("*.log")])

    def all_running(self):
        return set(self.states().values()) == {"RUNNING"}

    def check(self):
        """manage.py invariants: the protocol's invariants over every row."""
        return self.manage("invariants")

    def stop(self):
        if self.supervisord is not None and self.supervisord.poll() is None:
            self.supervisord.send_signal(signal.SIGTERM)
            try:
                self.supervisord.wait(60)
            except subprocess.TimeoutExpired:
                self.supervisord.kill()
            self.log.close()
        self.redis.stop()
        if self.cluster is None:
            self.proxy.stop()
            with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
                connection.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


def _unix_transport(socket_path):
    from supervisor.xmlrpc import SupervisorTransport

    return SupervisorTransport(None, None, f"unix://{socket_path}")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    yield from run_deployment(Deployment(tmp_path_factory.mktemp("chaos")))


def record(fault, recovery_s, verdict, health_worst_ms=None, recovery_steps=None):
    """A row of the table printed at the end of the run (RESULTS): a fault, its recovery (with when each of its steps
    came, in var/chaos.jsonl), what the ledger showed."""
    RESULTS.append(
        {
            "fault": fault,
            "recovery s": round(recovery_s, 2),
            "recovery steps s": recovery_steps,
            **{key: len(value) if isinstance(value, list) else value for key, value in verdict.items()},
            "health worst ms": health_worst_ms,
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
    )


def pytest_terminal_summary(terminalreporter):
    """The table of RESULTS (tests/chaos, tests/failover), printed and appended to var/chaos.jsonl once."""
    if not RESULTS:
        return
    terminalreporter.section("faults injected into production mode: what the ledger showed")
    header = (
        f"{'fault':<34} {'recovery':>9} {'flows':>6} {'timers':>6} {'lost':>5} {'dup':>4} {'early':>5} {'late p99':>9}"
    )
    terminalreporter.write_line(header)
    out = ROOT / "var" / "chaos.jsonl"
    out.parent.mkdir(exist_ok=True)
    with open(out, "a") as f:
        for row in RESULTS:
            late = "" if row["timer lateness p99 ms"] is None else f"{row['timer lateness p99 ms']} ms"
            terminalreporter.write_line(
                f"{row['fault']:<34} {row['recovery s']:>8.1f}s {row['workflows']:>6} {row['timers']:>6}"
                f" {row['lost']:>5} {row['duplicated']:>4} {row['early']:>5} {late:>9}"
            )
            f.write(json.dumps(row) + "\n")
    RESULTS.clear()
