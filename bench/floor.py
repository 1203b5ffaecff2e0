"""The floor: how fast any Python server could answer bench/run.py's requests on this machine.

    .venv/bin/python bench/floor.py --port 18033 --processes 16 --database postgres://…/resonate_bench

A server of the least work a Python front can do for each scenario of `run.py`, sending the same SQL as the
server (`bench/pgbench/*.sql`, with parameters where pgbench has variables), as the server sends them: a single
statement prepared by name and sent by libpq's own call (as the server's floor.rows._Single does once a statement
is prepared, without psycopg's cursor), several in one query string as EXECUTEs of statements prepared once:

- one process per connection, each blocking on its socket and its database connection, as pgbench runs one
  backend per client: no event loop, no threads, no hand-off;
- the least HTTP that wrk needs: the head read up to its blank line, the body by its Content-Length;
- the envelope decoded with orjson, and nothing validated: no protocol rule, no auth, no metrics, no logging,
  no outbox delivery;
- a reply built from the row the statement returned, encoded with orjson.

It is not a server: it answers wrk's four request shapes and nothing else, and trusts them. It measures what
the serving stack and the language leave for the protocol. A ratio to pgbench that the floor does not reach in
the same run is one no Python server reaches on this machine.
"""

import argparse
import os
import re
import time

import orjson
import psycopg
from least_http import answer_all, listening
from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.generators import execute

COLUMNS = (
    '"id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer",'
    ' "branch"'
)
PROMISE_COLUMNS = ("id", "state", "param", "value", "tags", "timeoutAt", "createdAt", "settledAt")
GET = f'SELECT {COLUMNS} FROM "promises_promise" WHERE "id" = %s'


def create_sql(task_state, task_values, message):
    """promise.create with a target (and an execute message) or task.create (its task acquired), one statement."""
    outbox = (
        """,
  d1 AS (INSERT INTO "outbox_message" ("key", "kind", "subject", "address", "data", "created_at", "state",
      "attempts", "next_attempt_at", "delivered_at", "unreached_since", "last_error")
    SELECT %s::text, 'execute'::varchar(7), %s::text, %s::text, %s::jsonb, %s::bigint, 'pending'::varchar(9),
      1::integer, %s::bigint, NULL::bigint, %s::bigint, 'no live poll connection for this address'::text FROM head
    ON CONFLICT ("key") DO UPDATE SET "address" = EXCLUDED."address", "data" = EXCLUDED."data",
      "created_at" = EXCLUDED."created_at", "state" = EXCLUDED."state", "attempts" = EXCLUDED."attempts",
      "next_attempt_at" = EXCLUDED."next_attempt_at", "delivered_at" = EXCLUDED."delivered_at",
      "unreached_since" = EXCLUDED."unreached_since", "last_error" = EXCLUDED."last_error" RETURNING 1)"""
        if message
        else ""
    )
    return f"""WITH head AS (INSERT INTO "promises_promise" ({COLUMNS})
    VALUES (%s::text, 'pending'::varchar(17), %s::jsonb, '{{}}'::jsonb, %s::jsonb, %s::bigint, %s::bigint,
      NULL::bigint, true::boolean, false::boolean, NULL::text)
    ON CONFLICT ("id") DO NOTHING RETURNING 1),
  d0 AS (INSERT INTO "tasks_task" ("id", "state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at")
    SELECT %s::text, '{task_state}'::varchar(9), {task_values}, %s::bigint FROM head RETURNING 1){outbox}
SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM head
UNION ALL SELECT false, {COLUMNS} FROM "promises_promise" WHERE "id" = %s"""


PROMISE_CREATE = create_sql("pending", "0::bigint, NULL::text, NULL::bigint, '[]'::jsonb, 0::smallint", message=True)
TASK_CREATE = create_sql("acquired", "1::bigint, %s::text, %s::bigint, '[]'::jsonb, 1::smallint", message=False)

# promise.settle with nothing registered: the lock, then the writes if it is live with nothing registered.
# task.fulfill with nothing registered: the same, if the caller also holds the task (acquired, at its version).
SETTLED_IF = """WITH provided AS MATERIALIZED (SELECT 1 FROM "promises_promise" WHERE "id" = %(id)s
    AND "state" = 'pending' AND "timeout_at" > %(now)s AND "created_at" <= %(now)s
    AND NOT EXISTS (SELECT 1 FROM "promises_listener" WHERE "promise_id" = %(id)s)
    AND NOT EXISTS (SELECT 1 FROM "promises_callback" WHERE "awaited_id" = %(id)s){held}
    AND current_setting('floor.held', true) = %(id)s),
  s0 AS (UPDATE "promises_promise" SET "state" = v.column2, "value" = v.column3, "settled_at" = v.column4,
      "timeout_armed" = v.column5
    FROM (VALUES (CAST(%(id)s AS text), CAST(%(state)s AS varchar(17)), CAST(%(value)s AS jsonb),
      CAST(%(now)s AS bigint), CAST(false AS boolean))) v
    WHERE "promises_promise"."id" = v.column1 AND EXISTS (SELECT 1 FROM provided)),
  s1 AS (UPDATE "tasks_task" SET "state" = 'fulfilled', "pid" = NULL, "ttl" = NULL, "resumes" = '[]'::jsonb,
      "timeout_kind" = NULL, "timeout_at" = NULL WHERE "id" = %(id)s AND EXISTS (SELECT 1 FROM provided)),
  s2 AS (DELETE FROM "promises_callback" WHERE "awaiter_id" IN (%(id)s) AND "awaited_id" NOT IN (%(id)s)
    AND EXISTS (SELECT 1 FROM provided))
SELECT count(*) FROM provided"""
LOCK = f"""SELECT held.*, set_config('floor.held', held."id"::text, true) FROM (SELECT {COLUMNS}
  FROM "promises_promise" WHERE "id" IN (%(id)s) ORDER BY "id" DESC FOR UPDATE) AS held"""
SETTLE = (LOCK, SETTLED_IF.format(held=""))
HELD = """
    AND EXISTS (SELECT 1 FROM "tasks_task" WHERE "id" = %(id)s AND "state" = 'acquired' AND "version" = %(version)s)"""
FULFILL = (LOCK, SETTLED_IF.format(held=HELD))


def now_ms():
    return time.time_ns() // 1_000_000


def promise(row):
    return dict(zip(PROMISE_COLUMNS, row[:8], strict=True))


class Handlers:
    def __init__(self, database):
        self.db = psycopg.connect(database, autocommit=True)
        self.several = psycopg.ClientCursor(self.db)  # its strings of several
        self.prepared = {}  # SQL: (its EXECUTE, its PREPARE not yet sent)
        self.transformer = Transformer(self.db)
        self.named = {}  # a single statement's SQL: its name, once prepared

    def one(self, sql, params):
        """A single statement, prepared by name at its first run and sent by libpq's own call, bound server-side: its
        rows."""
        pgconn, transformer = self.db.pgconn, self.transformer
        values = transformer.dump_sequence(params, [PyFormat.AUTO] * len(params))
        name = self.named.get(sql)
        if name is None:
            name = f"s{len(self.named)}".encode()
            pieces = sql.split("%s")
            numbered = pieces[0] + "".join(f"${n}{piece}" for n, piece in enumerate(pieces[1:], 1))
            pgconn.send_prepare(name, numbered.encode(), param_types=transformer.types)
            self.checked(self.db.wait(execute(pgconn)))
            self.named[sql] = name
        pgconn.send_query_prepared(name, values, param_formats=transformer.formats)
        result = self.checked(self.db.wait(execute(pgconn)))
        transformer.set_pgresult(result)
        return transformer.load_rows(0, result.ntuples, tuple)

    def checked(self, results):
        (result,) = results
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise errors.error_from_result(result, encoding="utf-8")
        return result

    def together(self, statements, params):
        """Statements in one query string, as the server sends them (floor.rows.send_all) once it has prepared
        them: each with parameters an EXECUTE of a statement prepared once (PREPARE in front of the first string
        that needs it), the others as they are. The rows of each (None for one that returns none)."""
        ahead, sent = [], []
        for sql in statements:
            if "%(" not in sql:
                sent.append(sql)
                continue
            if sql not in self.prepared:
                names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
                name = f"f{len(self.prepared)}"
                numbered = sql
                for number, named in enumerate(names, 1):
                    numbered = numbered.replace(f"%({named})s", f"${number}")
                execute = f"EXECUTE {name}({', '.join(f'%({n})s' for n in names)})"
                self.prepared[sql] = (execute, f"PREPARE {name} AS {numbered}")
            execute, prepare = self.prepared[sql]
            if prepare:
                ahead.append(prepare)
                self.prepared[sql] = (execute, None)
            sent.append(execute)
        cursor = self.several
        cursor.execute("; ".join(ahead + sent), params)
        for _ in ahead:
            cursor.nextset()
        results = []
        for _ in sent:
            results.append(cursor.fetchall() if cursor.description else None)
            cursor.nextset()
        return results

    def answer(self, kind, data):
        return getattr(self, kind.replace(".", "_"))(data)

    def promise_get(self, data):
        (row,) = self.one(GET, (data["id"],))
        return {"promise": promise(row)}

    def _created(self, found, data, now):
        """The promise a create statement made (from what was asked, as the server answers), or the one it found."""
        created, *row = found[0]
        if created:
            return {"id": data["id"], "state": "pending", "param": data.get("param", {}), "value": {}}
        return promise(row)

    def promise_create(self, data):
        now, id, target = now_ms(), data["id"], data["tags"]["resonate:target"]
        message = orjson.dumps({"task": {"id": id, "version": 0}}).decode()
        params = (id, orjson.dumps(data["param"]).decode(), orjson.dumps(data["tags"]).decode(), data["timeoutAt"], now)
        params += (id, now + 60_000, "e:" + id, id, target, message, now, now + 500, now, id)
        found = self.one(PROMISE_CREATE, params)
        return {
            "promise": {
                **self._created(found, data, now),
                "tags": data["tags"],
                "timeoutAt": data["timeoutAt"],
                "createdAt": now,
            }
        }

    def promise_settle(self, data):
        now = now_ms()
        value = orjson.dumps(data["value"]).decode()
        locked, _ = self.together(SETTLE, {"id": data["id"], "now": now, "state": data["state"], "value": value})
        row = locked[0]
        return {"promise": {**promise(row), "state": data["state"], "value": data["value"], "settledAt": now}}

    def task_create(self, data):
        now, created = now_ms(), data["action"]["data"]
        id = created["id"]
        params = (id, "{}", orjson.dumps(created["tags"]).decode(), created["timeoutAt"], now)
        params += (id, data["pid"], data["ttl"], now + data["ttl"], id)
        made = self._created(self.one(TASK_CREATE, params), created, now)
        return {"task": {"id": id, "version": 1}, "promise": {**made, "tags": created["tags"], "createdAt": now}}

    def task_fulfill(self, data):
        now, settled = now_ms(), data["action"]["data"]
        value = orjson.dumps(settled["value"]).decode()
        params = {"id": data["id"], "now": now, "state": settled["state"], "value": value, "version": data["version"]}
        row = self.together(FULFILL, params)[0][0]
        return {"promise": {**promise(row), "state": settled["state"], "value": settled["value"], "settledAt": now}}


def serve(listener, database):
    handlers = Handlers(database)
    while True:
        answer_all(listener.accept()[0], handlers)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--processes", type=int, required=True, help="at least as many as wrk's connections")
    parser.add_argument("--database", required=True)
    args = parser.parse_args()
    listener = listening(args.port)
    children = []
    for _ in range(args.processes):
        child = os.fork()
        if child == 0:
            serve(listener, args.database)
            os._exit(0)
        children.append(child)
    for _ in children:  # run.py stops the whole process group
        os.wait()


if __name__ == "__main__":
    main()
