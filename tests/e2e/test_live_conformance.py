"""The conformance state machine (tests/conformance) against real server processes, over HTTP.

The in-process conformance tests run the handlers inside a test transaction, with the queries watched, so the
hot path production runs is never reached there: kept cursors, statements prepared by psycopg once a connection
has sent them DATABASE_PREPARE_THRESHOLD times, statements sent together as the PL/pgSQL functions a process makes
of them (floor.functions) the second time it sends them, several threads each with its own connection, several
processes. Here the same random histories, compared step by step with the
executable specification (every status and every record as it comes, the whole stored state every few steps and
at the end of each history), go to:

- production mode on PostgreSQL: two `serve` processes (requests alternate between them), the Redis hub, a
  Celery worker and Beat, at DATABASE_PREPARE_THRESHOLD 0 (every statement prepared at once), 5 (the default: a
  statement runs through psycopg's cursor, then prepared by name, mid-history) and off (never prepared; any
  other threshold crosses as 5 does, sooner or later); the background is paused (debug.start)
  and time is moved by the histories themselves (resonate:debug_time, debug.tick), so that it is the model's;
- the embedded server (`manage.py serve`, the mode `bin/serve` runs) on SQLite (a database of its own: it runs in the
  PostgreSQL pass, beside the SQLite pass and the fault suite).

Connections, what each has prepared, and the functions made, live across histories: a threshold is crossed
somewhere in the middle of one. Every run ends with `manage.py invariants` over the database and with the servers'
logs free of 500s and tracebacks.

CONFORMANCE_LIVE_EXAMPLES (300) histories of CONFORMANCE_LIVE_STEPS (50) steps per configuration; more for a
sweep: CONFORMANCE_LIVE_EXAMPLES=10000 bin/test -k live_conformance
"""

import os
import time
from http.client import HTTPConnection
from urllib.parse import urlsplit

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, run_state_machine_as_test

from tests.conformance.test_conformance import Conformance
from tests.conftest import Protocol
from tests.e2e.conftest import Cluster, embedded_env, migrate, new_postgres_database, start_embedded
from tests.e2e.servers import assert_clean_logs, run_invariants

REDIS_DB = 8  # the machine's Redis, a database of its own (the production fixture uses 7)


class LiveProtocol(Protocol):
    """POST / to real server processes, in turn: consecutive requests of a history reach different processes."""

    def __init__(self, urls):
        super().__init__(client=None)
        # http.client sends a request's head and body in one write: two writes would wait on the server's ACK
        self.http = [HTTPConnection(urlsplit(url).hostname, urlsplit(url).port, timeout=30) for url in urls]
        self.posted, self.used = 0, {}

    IDLE_S = 2.0  # a connection idle this long is opened anew: the server closes one idle for 5 s (keep-alive)

    def post(self, body):
        http = self.http[self.posted % len(self.http)]
        self.posted += 1
        if time.monotonic() - self.used.get(id(http), 0) > self.IDLE_S:
            http.close()  # the next request connects again, rather than race the server's closing of it
        http.request("POST", "/", body=body, headers={"Content-Type": "application/json"})
        response = http.getresponse()
        answered = response.status, response.getheader("Content-Type"), response.read()
        self.used[id(http)] = time.monotonic()
        return answered

    def close(self):
        for http in self.http:
            http.close()


class LiveConformance(Conformance):
    """The in-process machine's rules and invariants, sent to LiveProtocol; counts what it ran."""

    histories = steps = 0
    snap_every = int(os.environ.get("CONFORMANCE_LIVE_SNAP_EVERY", 5))

    def __init__(self):
        super().__init__()
        type(self).histories += 1
        self.checked = -1  # hypothesis checks the invariants once before the first step, then after every step

    @invariant()
    def stored_state_matches_the_model(self):
        """Every reply is compared as it comes (send); the whole stored state every snap_every steps and at the end
        of the history (a debug.snap costs two requests' time)."""
        self.checked += 1
        type(self).steps += bool(self.checked)
        if self.checked % self.snap_every == 0:
            super().stored_state_matches_the_model()

    def teardown(self):
        super().stored_state_matches_the_model()


def live_settings():
    return settings(
        max_examples=int(os.environ.get("CONFORMANCE_LIVE_EXAMPLES", 300)),
        stateful_step_count=int(os.environ.get("CONFORMANCE_LIVE_STEPS", 50)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def run_histories(urls, label):
    protocol = LiveProtocol(urls)
    assert protocol("debug.start", {}).status == 200  # the background stays out of the model's time
    LiveConformance.protocol = protocol
    LiveConformance.histories = LiveConformance.steps = 0
    started = time.monotonic()
    try:
        run_state_machine_as_test(LiveConformance, settings=live_settings())
    finally:
        protocol.close()
        elapsed = time.monotonic() - started
        histories, steps = LiveConformance.histories, LiveConformance.steps
        print(f"\nlive conformance {label}: {histories} histories, {steps} steps, {elapsed:.1f} s")


@pytest.fixture
def own_database():
    """A database for one threshold's run: the histories leave it paused (debug.start) and holding what their last
    one made, often a schedule far behind its catch-up, which the next run's sweep, started before its histories
    pause it again, would fire under them."""
    yield from new_postgres_database(os.environ["DATABASE_URL"])


@pytest.mark.postgres
@pytest.mark.parametrize("threshold", ["0", "5", "off"])
def test_production_behaves_as_the_specification_at_every_prepare_threshold(threshold, own_database, tmp_path_factory):
    database_url = own_database
    redis.Redis(db=REDIS_DB).flushdb()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DATABASE_PREPARE_THRESHOLD": threshold,
        "RESONATE_BACKGROUND": "celery",
        "RESONATE_HUB_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "RESONATE_AUTH_DISABLED": "true",
        "RESONATE_DEBUG": "true",
    }
    logs = tmp_path_factory.mktemp(f"live-{threshold}")
    cluster = Cluster(env, logs)
    try:
        cluster.start()
        run_histories([server.url for server in cluster.servers], f"production, threshold {threshold}")
    finally:
        cluster.stop()
    run_invariants(database_url)
    assert_clean_logs(logs)


@pytest.mark.beside_postgres  # the embedded server as bin/serve runs it, on a SQLite database of its own
def test_the_embedded_server_behaves_as_the_specification(tmp_path_factory):
    database_url = f"sqlite:///{tmp_path_factory.mktemp('live-db') / 'embedded.sqlite3'}"
    migrate(database_url)
    env = {**embedded_env(database_url, server_settings={}), "RESONATE_DEBUG": "true"}  # the model's timings
    logs = tmp_path_factory.mktemp("live-embedded")
    server = start_embedded(env, logs / "server.log")
    try:
        run_histories([server.url], "embedded")
    finally:
        server.process.stop()
    run_invariants(database_url)
    assert_clean_logs(logs)
