"""The sweep's reads against the size of the backlog: they must not grow with it.

    .venv/bin/python bench/sweep_reads.py [--database-url postgres://postgres@127.0.0.1:5432/resonate_sweep_reads]

The sweeper asks for the earliest deadline (timeouts.due.next_due) several times a second, claims due entries a batch
at a time (timeouts.due.due, claim=True), and /metrics counts what is due (count_due). Every pending task has a retry
timeout, so a server with many queued tasks holds that many armed entries. For each size, a scratch database (dropped
and made again) gets that many pending tasks whose retry is an hour away, and a tenth as many due at one shared
deadline (a burst, a bulk import, the clock after an outage); then each read runs 20 times and its median is printed,
beside a `SELECT 1` round trip from the same connection (the least any read costs). The claim runs in a transaction
that is rolled back, so every run claims the same batch.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (10_000, 100_000, 300_000)
RUNS = 20
BATCH = 100  # RESONATE_SWEEP_BATCH's default


def psql(url, sql):
    subprocess.run(["psql", url, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, stdout=subprocess.DEVNULL)


def fresh(url):
    server, name = url.rsplit("/", 1)
    psql(f"{server}/postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    psql(f"{server}/postgres", f"CREATE DATABASE {name}")
    env = {**os.environ, "DATABASE_URL": url}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)


def fill(url, pending, due, now):
    later = now + 3_600_000
    psql(
        url,
        "INSERT INTO promises_promise SELECT 'b-' || n, 'pending', '{}', '{}', '{}', 4102444800000, 1, NULL, false,"
        f" false, NULL FROM generate_series(1, {pending + due}) n",
    )
    psql(
        url,
        f"INSERT INTO tasks_task SELECT 'b-' || n, 'pending', 0, NULL, NULL, '[]', 0,"
        f" CASE WHEN n <= {due} THEN {now - 1000} ELSE {later} + n END FROM generate_series(1, {pending + due}) n",
    )
    psql(url, "VACUUM ANALYZE")


def median_ms(read):
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(now):
    from django.db import connection, transaction

    from timeouts.due import count_due, due, next_due

    def select_one():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()

    def claim():
        with transaction.atomic():
            claimed = due("retry", now, limit=BATCH, claim=True)
            transaction.set_rollback(True)
        assert len(claimed) == BATCH, claimed

    select_one()  # connected
    return {
        "SELECT 1": median_ms(select_one),
        "next_due": median_ms(next_due),
        f"claim {BATCH}": median_ms(claim),
        "count_due": median_ms(lambda: count_due(now)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/resonate_sweep_reads")
    args = parser.parse_args()
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")
    sys.path.insert(0, str(ROOT))
    import django
    from django.db import connections

    django.setup()
    print("| pending tasks | due at one deadline | SELECT 1 ms | next_due ms | claim 100 ms | count_due ms |")
    print("|---|---|---|---|---|---|")
    for size in SIZES:
        connections.close_all()
        fresh(args.database_url)
        now = int(time.time() * 1000)
        fill(args.database_url, size, size // 10, now)
        ms = measure(now)
        row = " | ".join(f"{value:.2f}" for value in ms.values())
        print(f"| {size:,} | {size // 10:,} | {row} |", flush=True)
    connections.close_all()


if __name__ == "__main__":
    main()
