"""Timer lateness, sweep throughput, delivery latency and backlog drain, in production mode on PostgreSQL.

    .venv/bin/python bench/timers.py [--counts 1000,10000] [--rate 1000] [--executes 1000] [--backlog 10000]

Starts the production deployment of README.md (two server processes, a Celery worker, Celery Beat,
PostgreSQL, Redis) on a fresh database, opens one SSE stream, and for each count inserts that many
external promises, each with a listener on the stream, due at `rate` per second starting a few
seconds ahead, and beside them pending tasks targeted at the stream's group whose retry timeouts come
due at `executes` per second over the same window, each sending an execute (rows are written with SQL:
this measures the sweep and delivery, not creation). Reported:

- lateness: when the sweep fired the timeout (the unblock's outbox timestamp) minus timeoutAt;
- delivery latency: SSE receipt minus the outbox timestamp, for the unblocks and for the executes;
- sweep throughput: timeouts fired per second while a backlog was due (all due at once);
- backlog drain: `backlog` undelivered messages put in the outbox at once (as after an outage of
  the deliverers), then sent by Beat's delivery pass: messages per second until the last arrived.
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


def insert_executes(connection, run, count, first_due, rate, group):
    """`count` pending tasks targeted at `group`, their retry timeouts due at `rate` per second from `first_due`."""
    spacing = 1000 / rate
    tags = f'{{"resonate:target": "poll://any@{group}"}}'
    connection.execute(
        """INSERT INTO promises_promise (id, state, param, value, tags, timeout_at, created_at, timeout_armed, timer)
           SELECT %s || n, 'pending', '{}', '{}', %s, 4102444800000, %s, true, false
           FROM generate_series(0, %s - 1) n""",
        [f"{run}-", tags, now_ms(), count],
    )
    connection.execute(
        """INSERT INTO tasks_task (id, state, version, resumes, timeout_kind, timeout_at)
           SELECT %s || n, 'pending', 0, '[]', 0, %s + floor(n * %s)::bigint FROM generate_series(0, %s - 1) n""",
        [f"{run}-", first_due, spacing, count],
    )


def insert_backlog(connection, run, count, address):
    """`count` undelivered unblocks to `address`, due now, announced to nobody: Beat's pass finds them."""
    connection.execute(
        """INSERT INTO outbox_message (key, kind, subject, address, data, created_at, state, attempts,
                                       next_attempt_at, last_error)
           SELECT 'u:' || length(%s || n) || ':' || %s || n || %s, 'unblock', %s || n, %s,
                  json_build_object('promise', json_build_object('id', %s || n)), %s, 'pending', 0, %s, ''
           FROM generate_series(0, %s - 1) n""",
        [f"{run}-", f"{run}-", address, f"{run}-", address, f"{run}-", now_ms(), now_ms(), count],
    )


def percentiles(values):
    q = statistics.quantiles(values, n=100, method="inclusive")
    return f"p50 {q[49]:7.1f} ms  p99 {q[98]:7.1f} ms  max {max(values):7.1f} ms"


def measure(connection, listener, run, count, first_due, rate, executes=0):
    insert_timers(connection, run, count, first_due, rate, listener.address)
    execute_count = round(count * executes / rate)
    if execute_count:
        insert_executes(connection, f"x{run}", execute_count, first_due, executes, listener.group)
    received, executed = {}, {}
    deadline = time.monotonic() + 60 + count / rate
    while (len(received) < count or len(executed) < execute_count) and time.monotonic() < deadline:
        try:
            event = listener.next(timeout=5)
        except AssertionError:
            continue
        if event["kind"] == "unblock" and event["data"]["promise"]["id"].startswith(f"{run}-"):
            received[event["data"]["promise"]["id"]] = event["received_at"]
        elif event["kind"] == "execute" and event["data"]["task"]["id"].startswith(f"x{run}-"):
            executed.setdefault(event["data"]["task"]["id"], event["received_at"])
    if execute_count:
        sent = dict(
            connection.execute(
                "SELECT subject, created_at FROM outbox_message WHERE kind = 'execute' AND subject LIKE %s",
                [f"x{run}-%"],
            ).fetchall()
        )
        latency = [at - sent[id] for id, at in executed.items() if id in sent]
        print(
            f"{'':6}   executes at {executes}/s meanwhile: delivery {percentiles(latency)}"
            f"  ({len(executed)}/{execute_count} received)"
        )
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


def drain(connection, listener, count):
    """A backlog of `count` undelivered messages, put in the outbox at once: how fast it reaches the stream."""
    listener.drain()
    inserted = now_ms()
    insert_backlog(connection, "drain", count, listener.address)
    received = set()
    first = last = None
    deadline = time.monotonic() + 120
    while len(received) < count and time.monotonic() < deadline:
        try:
            event = listener.next(kind="unblock", timeout=5)
        except AssertionError:
            continue
        if event["data"]["promise"]["id"].startswith("drain-"):
            received.add(event["data"]["promise"]["id"])
            first = first or event["received_at"]
            last = event["received_at"]
    if received:
        print(
            f"backlog: {len(received)}/{count} undelivered messages arrived {(last - inserted) / 1000:.2f} s after"
            f" they were put in the outbox, {(last - first) / 1000:.2f} s from first to last"
            f" = {len(received) / max(1, last - first) * 1000:.0f} messages/s"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="1000,10000")
    parser.add_argument("--rate", type=int, default=1000, help="timers due per second")
    parser.add_argument("--executes", type=int, default=1000, help="executes per second beside the timers")
    parser.add_argument("--backlog", type=int, default=10000, help="undelivered messages drained at once")
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
        "RESONATE_RETRY_TIMEOUT_MS": "600000",  # each task's execute once in the run, not again every 5 s
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
                    lateness, delivery, _, got = measure(
                        connection, listener, run, count, now_ms() + 5000, args.rate, args.executes
                    )
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
                drain(connection, listener, args.backlog)
        finally:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
