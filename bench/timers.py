"""Timer lateness, sweep throughput and delivery latency, in production mode on PostgreSQL.

    .venv/bin/python bench/timers.py [--counts 1000,10000] [--rate 1000]

Starts the production deployment of README.md (a server process, a Celery worker, Celery Beat,
PostgreSQL, Redis) on a fresh database, opens one SSE stream, and for each count inserts that many
external promises, each with a listener on the stream, due at `rate` per second starting a few
seconds ahead (rows are written with SQL: this measures the sweep, not creation). Reported:

- lateness: when the sweep fired the timeout (the unblock's outbox timestamp) minus timeoutAt;
- sweep throughput: timeouts fired per second while a backlog was due (all due at once);
- delivery latency: SSE receipt minus the outbox timestamp.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

from tests.e2e.conftest import Cluster, migrate  # noqa: E402
from tests.e2e.servers import Listener, now_ms  # noqa: E402

DB = "resonate_timers"
DSN = "host=127.0.0.1 user=postgres"


def fresh_database():
    with psycopg.connect(f"{DSN} dbname=postgres", autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        connection.execute(f"CREATE DATABASE {DB}")
    url = f"postgres://postgres@127.0.0.1:5432/{DB}"
    migrate(url)
    return url


def insert_timers(connection, run, count, first_due, rate, address):
    """`count` external promises due at `rate` per second from `first_due`, each with a listener."""
    spacing = 1000 / rate
    connection.execute(
        """INSERT INTO promises_promise (id, state, param, value, tags, timeout_at, created_at, timeout_armed, timer)
           SELECT %s || n, 'pending', '{}', '{}', '{"resonate:external": "true"}', %s + floor(n * %s)::bigint, %s,
                  true, false
           FROM generate_series(0, %s - 1) n""",
        [f"{run}-", first_due, spacing, now_ms(), count],
    )
    connection.execute(
        "INSERT INTO promises_listener (promise_id, address) SELECT %s || n, %s FROM generate_series(0, %s - 1) n",
        [f"{run}-", address, count],
    )


def percentiles(values):
    q = statistics.quantiles(values, n=100, method="inclusive")
    return f"p50 {q[49]:7.1f} ms  p99 {q[98]:7.1f} ms  max {max(values):7.1f} ms"


def measure(connection, listener, run, count, first_due, rate):
    insert_timers(connection, run, count, first_due, rate, listener.address)
    received = {}
    deadline = time.monotonic() + 60 + count / rate
    while len(received) < count and time.monotonic() < deadline:
        try:
            event = listener.next(kind="unblock", timeout=5)
        except AssertionError:
            continue
        if event["data"]["promise"]["id"].startswith(f"{run}-"):
            received[event["data"]["promise"]["id"]] = event["received_at"]
    rows = connection.execute(
        """SELECT p.id, p.timeout_at, m.created_at, m.delivered_at FROM promises_promise p
           JOIN outbox_message m ON m.subject = p.id AND m.kind = 'unblock' WHERE p.id LIKE %s""",
        [f"{run}-%"],
    ).fetchall()
    lateness = [fired - due for _, due, fired, _ in rows]
    delivery = [received[id] - fired for id, _, fired, _ in rows if id in received]
    dispatch = [sent - fired for _, _, fired, sent in rows if sent]
    print(f"{'':6}   (outbox → deliverer recorded it sent: {percentiles(dispatch)})")
    fired_times = sorted(fired for _, _, fired, _ in rows)
    return lateness, delivery, fired_times, len(received)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1000,10000")
    parser.add_argument("--rate", type=int, default=1000, help="timers due per second")
    args = parser.parse_args()
    url = fresh_database()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "RESONATE_BACKGROUND": "celery",
        "RESONATE_HUB_URL": "redis://127.0.0.1:6379/8",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/8",
        "RESONATE_SWEEP_PERIOD_MS": "1000",
        "RESONATE_SSE_MAX_AGE_MS": "600000",
        "RESONATE_AUTH_DISABLED": "true",  # measured without auth
    }
    import redis

    redis.Redis(db=8).flushdb()
    with tempfile.TemporaryDirectory() as logs:
        cluster = Cluster(env, Path(logs))
        cluster.start()
        try:
            listener = Listener(cluster.servers[0].url, "bench", "l")
            listener.address = "poll://uni@bench/l"
            with psycopg.connect(f"{DSN} dbname={DB}", autocommit=True) as connection:
                time.sleep(3)  # Beat's first sweep
                for count in (int(c) for c in args.counts.split(",")):
                    run = f"t{count}"
                    lateness, delivery, _, got = measure(connection, listener, run, count, now_ms() + 5000, args.rate)
                    print(
                        f"{count:6} timers at {args.rate}/s  lateness  {percentiles(lateness)}"
                        f"  ({got}/{count} unblocks received)"
                    )
                    print(f"{'':6}                     delivery  {percentiles(delivery)}", flush=True)
                backlog = 5000
                _, _, fired, _ = measure(connection, listener, "backlog", backlog, now_ms() + 3000, 10**9)
                print(
                    f"sweep throughput: {backlog} timeouts due at once fired in {(fired[-1] - fired[0]) / 1000:.2f} s"
                    f" = {backlog / max(1, fired[-1] - fired[0]) * 1000:.0f} timeouts/s"
                )
        finally:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
