"""Parts the fault tests break on purpose: a Redis of their own, and a TCP proxy in front of PostgreSQL.

The machine's own PostgreSQL and Redis are shared and never stopped: tests kill and pause their own
Redis (another port) and cut, refuse and slow PostgreSQL connections at the proxy.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.chaos.proxy import Proxy
from tests.e2e.servers import ROOT, free_port


def wait_for_port(port, timeout=10, up=True):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
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

    def start(self):
        self.log = open(self.directory / f"redis-{self.port}.log", "a")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
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
        self.port, self.control_port = free_port(), free_port()
        self.log = open(Path(directory) / f"pgproxy-{self.port}.log", "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.proxy", str(self.port), upstream, str(self.control_port)],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        wait_for_port(self.control_port)
        self.control = Proxy(self.control_port)

    def __call__(self, command):
        return self.control(command)

    def url(self, database, user="postgres"):
        return f"postgres://{user}@127.0.0.1:{self.port}/{database}"

    def stop(self):
        self.process.kill()
        self.process.wait()
        self.log.close()


def run_deployment(deployment):
    """A production deployment (tests/chaos, tests/linearizability) started for a module's tests and stopped after
    them, whatever happens: a generator for a module fixture to yield from."""
    from django.conf import settings

    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        raise RuntimeError("production mode runs on PostgreSQL: mark the test postgres")
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()
