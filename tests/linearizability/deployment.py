"""The deployments the concurrent histories run on: production mode (two server processes, a Celery worker and Beat,
on a database of its own behind a PgProxy and on a Redis of its own, each part killable and restartable by the test),
and the embedded mode (`manage.py serve` on a SQLite database of its own)."""

import os
import re
import signal
import subprocess
import uuid
from contextlib import contextmanager
from pathlib import Path

import dj_database_url
import psycopg

from tests.e2e.conftest import embedded_env, production_env
from tests.e2e.servers import ROOT, Process, free_port, runtime_python, wait_ready
from tests.faults import OwnRedis, PgProxy

# A request answered with a 5xx other than 503 (resonate.request logs every 5xx at WARNING, text or JSON).
SERVER_ERROR = re.compile(r"resonate\.request \S+ \S+ (5(?!03)\d\d) |\"status\": (5(?!03)\d\d)")


class Deployment:
    """Everything production mode runs, started by start() and stopped by stop().

    The servers run with RESONATE_DEBUG=true only so that every request can carry head["resonate:debug_time"]
    (workload.NOW): all else is production's configuration. serving_with() runs the servers with a defect.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        self.bug = None
        admin = dj_database_url.parse(os.environ["DATABASE_URL"])  # before anything is started that would outlive it
        self.redis = OwnRedis(self.directory).start()
        self.proxy = PgProxy(self.directory)
        self.database = f"resonate_lin_{uuid.uuid4().hex[:10]}"
        self.admin_dsn = f"host={admin['HOST']} port={admin['PORT']} user={admin['USER']} dbname=postgres"
        self.direct_url = f"postgres://{admin['USER']}@{admin['HOST']}:{admin['PORT']}/{self.database}"
        self.env = production_env(
            self.proxy.url(self.database, admin["USER"]),
            self.redis.url,
            server_settings={},  # production's own timers
            RESONATE_SWEEP_PERIOD_MS="1000",
            RESONATE_AUTH_DISABLED="true",
            RESONATE_DEBUG="true",
        )
        self.ports = [free_port(), free_port()]
        self.servers = [None, None]
        self.worker = self.beat = None
        self.starts = 0

    @property
    def urls(self):
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def start(self):
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{self.database}"')
        self.manage("migrate", "-v", "0")
        for n in range(2):
            self.servers[n] = self._serve(n)
        for n in range(2):
            wait_ready(self.urls[n], self.servers[n])
        celery = ["-m", "celery", "-A", "resonate_site"]
        self.worker = self._process(
            [*celery, "worker", "--concurrency", "4", "--loglevel", "warning", "--without-gossip", "--without-mingle"],
            "worker",
        )
        beat_schedule = str(self.directory / "beat-schedule")
        self.beat = self._process([*celery, "beat", "--loglevel", "warning", "--schedule", beat_schedule], "beat")

    def _serve(self, n):
        serve = ["manage.py", "serve", "--port", str(self.ports[n]), "--log-level", "warning"]
        if self.bug:
            serve = ["-m", "tests.linearizability.injected", self.bug, *serve]
        return self._process(serve, f"server-{n}")

    def _process(self, args, name):
        self.starts += 1
        return Process(args, self.env, self.directory / f"{name}.{self.starts}.log", python=runtime_python())

    def kill_server(self, n):
        """SIGKILL to the server process (and anything it started): no chance to finish a request or a commit."""
        self.servers[n].kill(signal.SIGKILL)
        self.servers[n].log.close()

    def restart_server(self, n):
        self.servers[n] = self._serve(n)
        wait_ready(self.urls[n], self.servers[n])

    @contextmanager
    def serving_with(self, bug):
        """Within: both server processes run with the defect `bug` of injected.py; then as shipped again."""
        self._serve_both(bug)
        try:
            yield self
        finally:
            self._serve_both(None)

    def _serve_both(self, bug):
        for n in range(2):  # no grace needed: nothing is under way between two tests
            self.kill_server(n)
        self.bug = bug
        self.servers = [self._serve(n) for n in range(2)]
        for n in range(2):
            wait_ready(self.urls[n], self.servers[n])

    @contextmanager
    def slow_database(self, ms):
        """Within: every chunk between the processes and PostgreSQL is forwarded `ms` late, each way (the proxy's
        delay), which stretches the time between two statements of one request to 2 * `ms` at least."""
        self.proxy(f"delay {ms}")
        try:
            yield self
        finally:
            self.proxy("normal")

    def drop_connections(self):
        """Every PostgreSQL connection of every process reset at once (RST), as a crashed database host does."""
        self.proxy("drop")

    def manage(self, *args):
        """A manage.py command on the runtime interpreter, straight to PostgreSQL (not through the proxy)."""
        return subprocess.run(
            [runtime_python(), "manage.py", *args],
            cwd=ROOT,
            env={**self.env, "DATABASE_URL": self.direct_url},
            capture_output=True,
            text=True,
            timeout=300,
        )

    def invariant_violations(self, now):
        """What `manage.py invariants` reports over every row, read at `now` (the run's debug time, ahead of the
        clock: the clock-relative invariants read at the clock would see every row as made in the future): ""
        when they all hold. A command without --now (older) reads them at the clock."""
        done = self.manage("invariants", "--now", str(now))
        if done.returncode == 2 and "unrecognized arguments: --now" in done.stderr:
            done = self.manage("invariants")
        return "" if done.returncode == 0 else f"{done.stdout}\n{done.stderr}"

    def log_marks(self):
        """Where each log ends now, for log_problems(since=…)."""
        return {path: path.stat().st_size for path in self._logs()}

    def log_problems(self, since=None):
        """Lines of every process's log (written after `since`) that show a traceback or a 5xx other than 503."""
        found = []
        for path in self._logs():
            with open(path, "rb") as log:
                log.seek((since or {}).get(path, 0))
                text = log.read().decode(errors="replace")
            for line in text.splitlines():
                if "Traceback" in line or SERVER_ERROR.search(line):
                    found.append(f"{path.name}: {line.strip()}")
        return found

    def _logs(self):
        """The logs of the servers, the worker and Beat (not the proxy's or Redis's)."""
        return sorted(p for p in self.directory.glob("*.log") if p.name.startswith(("server-", "worker", "beat")))

    def stop(self):
        for process in [self.beat, self.worker, *self.servers]:
            if process is not None:
                process.stop()
        self.proxy.stop()
        self.redis.stop()
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


class EmbeddedDeployment(Deployment):
    """The embedded mode as `bin/serve` runs it: one `manage.py serve` on SQLite that sweeps and delivers in its own
    process, where the requests open at once are committed together (floor.transactions.run_together). With
    RESONATE_DEBUG=true for the histories' debug time, as Deployment."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.bug = None
        self.env = {
            **embedded_env(f"sqlite:///{self.directory / 'embedded.sqlite3'}", server_settings={}),
            "RESONATE_AUTH_DISABLED": "true",
            "RESONATE_DEBUG": "true",
        }
        self.ports, self.servers, self.starts = [free_port()], [None], 0

    def start(self):
        self.manage("migrate", "-v", "0")
        self.servers[0] = self._serve(0)
        wait_ready(self.urls[0], self.servers[0])

    def manage(self, *args):
        return subprocess.run(
            [runtime_python(), "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300
        )

    def stop(self):
        if self.servers[0] is not None:
            self.servers[0].stop()
