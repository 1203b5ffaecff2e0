"""Tag search at a million promises on PostgreSQL: no index on tags, then each GIN index considered for it.

    .venv/bin/python bench/tag_search.py [--rows 1000000] [--runs 10] [--keep] | tee bench/results/tag_search.txt

Makes the scratch database resonate_tagsearch (dropped first if it is there, and at the end unless --keep), migrates
it, drops promise_tags (promises/models.py) and fills promises_promise in one INSERT … generate_series with the tags
the released SDKs write: roots and rpc children (global, with a target), timers, and run children (local), all with
resonate:origin, :parent and :branch; one workflow of 1,000 promises, one of 100,000, the rest of 10; a customer tag
on 1 in 100,000. Then for no index and each index in INDEXES: its size and build time (CONCURRENTLY, as the
migration builds it); the searches' SELECTs as the server sends them, captured from promise.search and the console's
list, with EXPLAIN (ANALYZE, BUFFERS) and the median time of `--runs` more runs; then 50,000 single-row INSERTs, one
a transaction (synchronous_commit off, so that WAL flushes do not drown the index's share), which is what each
promise.create pays for the index, with the rare tag's search among them (as a pending list grows).
"""

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DB = "resonate_tagsearch"
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DB}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from floor.protocol import tagged  # noqa: E402
from promises.handlers import promise_search  # noqa: E402
from promises.models import Promise  # noqa: E402

START = 1_700_000_000_000  # created_at of the first promise, ms; one every 10 ms after it
TARGET = "poll://any@default"
RARE = "rare tag (10 rows)"

# A promise's workflow (its root's id: hex for the small ones, which spreads them over the id order as arbitrary
# ids are) and its place k in it (0: the root), then its kind: every third child is an rpc (global, its own branch,
# a target), the fifth of each ten a timer, the rest runs (local, the root's branch). The newest 1% are pending.
FILL = """
INSERT INTO promises_promise (id, state, param, value, tags, timeout_at, created_at, settled_at, timeout_armed,
                              timer, branch)
SELECT id, state, '{"data": "eyJmdW5jIjogImNoYXJnZSIsICJhcmdzIjogWzQyLCAiZXVyIl19"}', value, tags,
       created_at + 86400000, created_at, CASE WHEN state = 'resolved' THEN created_at + 5 END,
       state = 'pending' AND tags ? 'resonate:target', kind = 'timer', tags ->> 'resonate:branch'
FROM (
  SELECT *, jsonb_build_object('resonate:origin', root, 'resonate:parent', root,
              'resonate:branch', CASE WHEN kind = 'run' THEN root ELSE id END,
              'resonate:scope', CASE WHEN kind = 'run' THEN 'local' ELSE 'global' END)
            || CASE kind WHEN 'rpc' THEN jsonb_build_object('resonate:target', %(target)s::text)
                         WHEN 'timer' THEN '{"resonate:timer": "true"}' ELSE '{}' END::jsonb
            || CASE WHEN n %% 100000 = 4242 THEN '{"customer": "c-4242"}' ELSE '{}' END::jsonb AS tags,
         CASE WHEN n >= %(rows)s * 0.99 THEN 'pending' ELSE 'resolved' END AS state,
         CASE WHEN n >= %(rows)s * 0.99 THEN '{}' ELSE '{"data": "eyJvayI6IHRydWV9"}' END::jsonb AS value,
         %(start)s::bigint + n * 10 AS created_at
  FROM (
    SELECT *, CASE WHEN k = 0 THEN root ELSE root || '.' || k END AS id,
           CASE WHEN k = 0 OR k %% 3 = 0 THEN 'rpc' WHEN k %% 10 = 5 THEN 'timer' ELSE 'run' END AS kind
    FROM (
      SELECT n,
             CASE WHEN n < 1000 THEN 'checkout' WHEN n < 101000 THEN 'backfill'
                  ELSE substr(md5(((n - 101000) / 10)::text), 1, 16) END AS root,
             CASE WHEN n < 1000 THEN n WHEN n < 101000 THEN n - 1000 ELSE (n - 101000) %% 10 END AS k
      FROM generate_series(0, %(rows)s - 1) AS n
    ) AS placed
  ) AS kinds
) AS rows
"""

INSERT = """
INSERT INTO promises_promise (id, state, param, value, tags, timeout_at, created_at, timeout_armed, timer)
VALUES (%s, 'pending', '{"data": "eyJmdW5jIjogImNoYXJnZSJ9"}', '{}', %s, 9000000000000, 1800000000000, true, false)
"""

INDEXES = {  # what follows USING in each CREATE INDEX; the last is promise_tags as migrated
    "jsonb_ops": "gin (tags jsonb_ops) WITH (fastupdate = off)",
    "jsonb_path_ops, fastupdate on (GIN's default)": "gin (tags jsonb_path_ops)",
    "jsonb_path_ops, fastupdate off": "gin (tags jsonb_path_ops) WITH (fastupdate = off)",
}


def searches(rows):
    """{label: a function that sends the search's SELECT}: promise.search (page of 100, by id) and the console."""
    now = START + rows * 10

    def search(tags, **req):
        return lambda: promise_search({"tags": tags, "limit": 100, **req}, now)

    checkout = {"resonate:origin": "checkout"}
    return {
        RARE: search({"customer": "c-4242"}),
        "workflow of 1,000 (origin)": search(checkout),
        "  + state=pending (none)": search(checkout, state="pending"),
        "  + cursor (2nd page)": search(checkout, cursor="checkout.189"),
        "  + 2nd tag (scope=global)": search({**checkout, "resonate:scope": "global"}),
        "console list, workflow of 1,000": lambda: list(
            tagged(Promise.objects.all(), "tags", checkout).order_by("-created_at", "-id")[:50]
        ),
        "workflow of 100,000 (origin)": search({"resonate:origin": "backfill"}),
        "common tag (target, 37%)": search({"resonate:target": TARGET}),
    }


def sent(run):
    """The one SELECT run() sends, as sent (client-side binding: its values inline)."""
    with CaptureQueriesContext(connection) as captured:
        run()
    [query] = captured.captured_queries
    return query["sql"]


def sql(statement, params=None):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else None


def timed(statement, runs):
    """Median wall time of `runs` executions, ms."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        sql(statement)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def plan_nodes(plan):
    """The node types of an EXPLAIN text, outermost first: "Limit > Index Scan (promises_promise_pkey)"."""
    nodes = []
    for line in plan:
        found = re.match(r"\s*(?:->\s*)?([A-Z][A-Za-z ]+?)(?: using (\S+))?(?: on \S+)?\s+\(cost", line)
        if found:
            nodes.append(found[1] + (f" ({found[2]})" if found[2] else ""))
    return " > ".join(nodes)


def measure(label, statements, runs):
    print(f"\n## {label}\n")
    summary = []
    for name, statement in statements.items():
        plan = [line for (line,) in sql(f"EXPLAIN (ANALYZE, BUFFERS) {statement}")]
        print(f"### {name}\n{statement}\n" + "\n".join(plan) + "\n")
        executed = float(re.search(r"Execution Time: ([\d.]+)", "\n".join(plan))[1])
        summary.append((name, plan_nodes(plan), executed, timed(statement, runs)))
    return summary


def write_cost(rare_search, runs, count=50_000):
    """INSERT times of `count` new promises, ms (mean, p50, p99, max), and the slowest of the rare tag's searches
    after every 10,000 of them; the promises are then deleted."""
    times, searched = [], []
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DB}", autocommit=True) as db:
        db.execute("SET synchronous_commit = off")
        for n in range(count):
            root = f"new-{n // 10}"
            tags = (
                f'{{"resonate:origin": "{root}", "resonate:parent": "{root}", "resonate:branch": "new-{n}",'
                f' "resonate:scope": "global", "resonate:target": "{TARGET}"}}'
            )
            began = time.perf_counter()
            db.execute(INSERT, [f"new-{n}", tags])
            times.append((time.perf_counter() - began) * 1000)
            if n % 10_000 == 9_999:
                searched.append(timed(rare_search, runs))
    sql("DELETE FROM promises_promise WHERE id LIKE 'new-%'")
    sql("VACUUM promises_promise")
    times.sort()
    return statistics.mean(times), times[len(times) // 2], times[len(times) * 99 // 100], times[-1], max(searched)


def fresh_database():
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DB}")
    call_command("migrate", verbosity=0)


def drop_database():
    connection.close()
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10, help="timed runs of each search, after its EXPLAIN ANALYZE")
    parser.add_argument("--keep", action="store_true", help="leave resonate_tagsearch behind")
    args = parser.parse_args()

    fresh_database()
    sql("DROP INDEX promise_tags")
    began = time.perf_counter()
    sql(FILL, {"rows": args.rows, "target": TARGET, "start": START})
    sql("VACUUM ANALYZE promises_promise")
    [(table, version)] = sql("SELECT pg_size_pretty(pg_table_size('promises_promise')), version()")
    print(f"# {args.rows:,} promises in {time.perf_counter() - began:.1f} s (table {table}); {version}")
    statements = {name: sent(run) for name, run in searches(args.rows).items()}

    results = {}
    for label, index in {"no index": None, **INDEXES}.items():
        size = "-"
        if index:
            began = time.perf_counter()
            sql(f"CREATE INDEX CONCURRENTLY promise_tags ON promises_promise USING {index}")
            built = time.perf_counter() - began
            [(pretty,)] = sql("SELECT pg_size_pretty(pg_relation_size('promise_tags'))")
            size = f"{pretty}, built in {built:.1f} s"
            sql("ANALYZE promises_promise")
        searched = measure(f"{label}: {size}", statements, args.runs)
        results[label] = size, searched, write_cost(statements[RARE], args.runs)
        sql("DROP INDEX IF EXISTS promise_tags")

    print("\n## Summary: EXPLAIN ANALYZE execution time and median of runs, ms\n")
    for label, (size, searched, (mean, p50, p99, most, rare)) in results.items():
        print(f"{label}: index {size}")
        print(f"  {'INSERT mean / p50 / p99 / max':<34} {mean:.3f} / {p50:.3f} / {p99:.3f} / {most:.1f}")
        print(f"  {'rare tag while inserting (worst)':<34} {'':>9} {rare:>9.3f}")
        for name, nodes, executed, median in searched:
            print(f"  {name:<34} {executed:>9.3f} {median:>9.3f}  {nodes}")
    if not args.keep:
        drop_database()


if __name__ == "__main__":
    main()
