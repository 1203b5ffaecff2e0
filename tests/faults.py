"""Parts the fault tests break on purpose: a Redis of their own, and a TCP proxy in front of PostgreSQL.

The machine's own PostgreSQL and Redis are shared and never stopped: tests kill and pause their own
Redis (another port) and cut, refuse and slow PostgreSQL connections at the proxy.
"""

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from tests.chaos.proxy import Proxy
from tests.e2e.servers import ROOT, free_port


class Exited(RuntimeError):
    """The process that was to listen on a port exited first: most often its port, which free_port only guessed was
    free, was taken meanwhile (an outgoing connection of another test on the machine got it as its own port)."""


def wait_for_port(port, timeout=10, up=True, process=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise Exited(f"the process for port {port} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            if up:
                return
        except OSError:
            if not up:
                return
        time.sleep(0.02)
    raise RuntimeError(f"port {port} still {'closed' if up else 'open'} after {timeout} s")


class OwnRedis:
    """A redis-server on a port of its own, with nothing on disk: kill it and its data is gone, as in production."""

    def __init__(self, directory, port=None):
        self.port = port or free_port()
        self.directory = Path(directory)
        self.process = None
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, extra=()):
        self.log = open(self.directory / f"redis-{self.port}.log", "a")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *extra],
            cwd=self.directory,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port)
        return self

    def kill(self):
        """SIGKILL: clients see their connections reset and the data is lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
            self.log.close()
        self.process = None

    def pause(self):
        """SIGSTOP: connections stay open and nothing answers."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self):
        self.process.send_signal(signal.SIGCONT)

    stop = kill


class PgProxy:
    """tests/chaos/proxy.py as a process in front of the machine's PostgreSQL; call it with a command."""

    def __init__(self, directory, upstream="127.0.0.1:5432"):
        for attempt in range(5):  # on other ports when one was taken before the proxy could bind it (Exited)
            self.port, self.control_port = free_port(), free_port()
            self.log = open(Path(directory) / f"pgproxy-{self.port}.log", "w")  # noqa: SIM115 (closed in stop)
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.proxy", str(self.port), upstream, str(self.control_port)],
                cwd=ROOT,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            try:
                wait_for_port(self.control_port, process=self.process)
                break
            except Exited:
                self.log.close()
                if attempt == 4:
                    raise
        self.control = Proxy(self.control_port)

    def __call__(self, command):
        return self.control(command)

    def url(self, database, user="postgres"):
        return f"postgres://{user}@127.0.0.1:{self.port}/{database}"

    def stop(self):
        self.process.kill()
        self.process.wait()
        self.log.close()


def postgres_server_url():
    """The PostgreSQL server tests make their databases on: DATABASE_URL's in the PostgreSQL pass; in the SQLite pass
    (tests marked beside_sqlite) RESONATE_TEST_POSTGRES_URL's, by default the machine's 127.0.0.1:5432."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        return url
    return os.environ.get("RESONATE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")


def run_deployment(deployment):
    """A production deployment (tests/chaos, tests/failover, tests/linearizability) started for a module's tests and
    stopped after them, whatever happens: a generator for a module fixture to yield from."""
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()


class PgCluster:
    """A PostgreSQL primary and a streaming standby of the fault tests' own: the machine's PostgreSQL binaries (initdb,
    pg_basebackup, pg_ctl) run as the postgres user, on ports and in a directory of their own. The machine's own
    cluster is never touched.

    synchronous: the primary waits for the standby to have each commit's WAL before it answers
    (synchronous_standby_names), or not. replication_delay_ms: the standby's WAL stream passes through a PgProxy that
    holds it that long (a standby behind its primary, as over a slow link).
    """

    USER = "postgres"

    def __init__(self, synchronous=True, replication_delay_ms=0):
        self.directory = Path(tempfile.mkdtemp(prefix="resonate-pg-"))  # not under pytest's root-only tmp dirs
        shutil.chown(self.directory, self.USER)
        self.synchronous, self.replication_delay_ms = synchronous, replication_delay_ms
        self.ports = {"primary": free_port(), "standby": free_port()}
        self.replication = None  # the PgProxy the WAL stream goes through, when delayed
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])

    def run(self, *args, check=True):
        """A PostgreSQL program as the postgres user (initdb and postgres refuse to run as root)."""
        program = str(self.bin / args[0])
        return subprocess.run(
            ["runuser", "-u", self.USER, "--", program, *args[1:]],
            cwd=self.directory,
            check=check,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def data(self, node):
        return self.directory / node

    def start(self):
        """Both nodes running, the standby streaming; on any failure on the way, both stopped and the directory gone."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self):
        self.run("initdb", "-D", str(self.data("primary")), "-U", self.USER, "--auth=trust", "-N")
        self.configure(
            "primary",
            wal_level="replica",
            max_wal_senders=4,
            wal_keep_size="256MB",
            synchronous_standby_names="'standby'" if self.synchronous else "''",
        )
        self.pg_ctl("primary", "start")
        upstream_port = self.ports["primary"]
        if self.replication_delay_ms:
            self.replication = PgProxy(self.directory, upstream=f"127.0.0.1:{upstream_port}")
            self.replication(f"delay {self.replication_delay_ms}")
            upstream_port = self.replication.port
        self.run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.ports["primary"]), "-U", self.USER,
            "-D", str(self.data("standby")), "-X", "stream", "-R",
        )  # fmt: skip
        self.configure(
            "standby",
            primary_conninfo=f"'host=127.0.0.1 port={upstream_port} user={self.USER} application_name=standby'",
            # Promoted, it has no standby of its own: waiting for one (the primary's setting, which pg_basebackup
            # copied) would hold every commit for ever. A failover manager (Patroni) sets this on promotion.
            synchronous_standby_names="''",
        )
        self.pg_ctl("standby", "start")
        self.wait_streaming()
        return self

    def configure(self, node, **settings):
        settings = {
            "port": self.ports[node],
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.directory}'",
            "max_connections": 200,
            "hot_standby": "on",
            **settings,
        }
        with open(self.data(node) / "postgresql.auto.conf", "a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def pg_ctl(self, node, *args):
        log = self.directory / f"{node}.log"
        return self.run("pg_ctl", "-D", str(self.data(node)), "-l", str(log), "-w", *args)

    def wait_streaming(self, timeout=60):
        """Until the primary sees its standby streaming (and, if synchronous, as its synchronous standby)."""
        wanted = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with psycopg.connect(self.dsn("primary"), autocommit=True) as connection:
                found = connection.execute("SELECT state, sync_state FROM pg_stat_replication").fetchall()
            if ("streaming", wanted) in found:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the standby is not streaming after {timeout} s; see {self.directory}/standby.log")

    def dsn(self, node, database="postgres"):
        return f"host=127.0.0.1 port={self.ports[node]} user={self.USER} dbname={database}"

    def multi_host_url(self, database):
        """libpq's multi-host form: the processes find whichever node takes writes."""
        hosts = ",".join(f"127.0.0.1:{self.ports[node]}" for node in ("primary", "standby"))
        return f"postgres://{self.USER}@{hosts}/{database}?target_session_attrs=read-write"

    def create_database(self, name):
        with psycopg.connect(self.dsn("primary"), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')

    def crash_primary(self):
        """pg_ctl stop -m immediate: the primary's processes quit at once, as when its machine is lost; so is the WAL
        on its way to a standby behind it (the replication proxy's connections reset, what they held dropped)."""
        if self.replication is not None:
            self.replication("refuse")
        self.pg_ctl("primary", "stop", "-m", "immediate")

    def promote(self):
        self.pg_ctl("standby", "promote")

    def stop(self):
        for node in ("primary", "standby"):  # each, whatever the other's stop says (a primary lost already has none)
            if (self.data(node) / "postmaster.pid").exists():
                self.run("pg_ctl", "-D", str(self.data(node)), "-w", "stop", "-m", "immediate", check=False)
        if self.replication is not None:
            self.replication.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


class OwnSentinel:
    """A Redis primary, its replica and three sentinels of the fault tests' own (Debian's redis-server, in sentinel
    mode for the sentinels), on ports of their own, nothing on disk: kill_primary() and the sentinels promote the
    replica within about 2 s (down-after 1 s, then their vote)."""

    SERVICE = "resonate"

    def __init__(self, directory):
        self.directory = Path(directory) / f"sentinel-{free_port()}"
        self.directory.mkdir()
        self.primary = OwnRedis(self.directory)
        self.replica = OwnRedis(self.directory)
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels = []

    @property
    def url(self):
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"sentinel://{hosts}/{self.SERVICE}/0"

    def start(self):
        self.primary.start()
        self.replica.start(extra=["--replicaof", "127.0.0.1", str(self.primary.port)])
        for port in self.sentinel_ports:
            conf = self.directory / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {self.SERVICE} 1000\n"
                f"sentinel failover-timeout {self.SERVICE} 5000\n"
            )
            log = open(self.directory / f"sentinel-{port}.log", "w")  # noqa: SIM115 (closed with the process)
            process = subprocess.Popen(
                [self.primary.binary, str(conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT
            )
            self.sentinels.append((process, log))
            wait_for_port(port)
        self.wait_for_primary(self.primary.port)
        return self

    def primary_port(self):
        """The port of the primary as the sentinels name it now (None while they cannot say)."""
        import redis

        for port in self.sentinel_ports:
            try:
                found = redis.Redis(port=port, socket_timeout=1).sentinel_get_master_addr_by_name(self.SERVICE)
            except redis.RedisError:
                continue
            if found:
                return int(found[1])
        return None

    def wait_for_primary(self, port, timeout=30):
        deadline = time.monotonic() + timeout
        while self.primary_port() != port:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinels do not name 127.0.0.1:{port} primary after {timeout} s")
            time.sleep(0.1)

    def kill_primary(self):
        """SIGKILL the primary; returns once the sentinels name the replica primary in its place."""
        self.primary.kill()
        self.wait_for_primary(self.replica.port)

    def stop(self):
        for process, log in self.sentinels:
            process.kill()
            process.wait()
            log.close()
        self.primary.kill()
        self.replica.kill()
