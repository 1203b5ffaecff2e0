"""The embedded mode's floor: how fast any Python server could answer bench/run.py --embedded's requests on SQLite.

    .venv/bin/python bench/floor_sqlite.py --port 18034 --database /path/to/embedded.sqlite3

The least work a Python front can do for promise.create (with a target) and promise.get on the embedded mode's
database, with the statements the server sends there (captured from it: the promise, its task and its execute
message in one BEGIN IMMEDIATE … COMMIT; a get's one SELECT) and its PRAGMAs (WAL, synchronous=NORMAL):

- one process, as the embedded mode is; a thread per connection, each blocking on its socket and its own SQLite
  connection, taking turns to write on one lock (as floor/sqlite3/base.py has the server's threads do);
- the least HTTP that wrk needs, the envelope decoded with orjson and nothing validated, a reply built from what
  was asked or the row read, encoded with orjson;
- no background work: no sweeper, no deliverer. The server's embedded mode does both in the same process.

It is not a server: it answers wrk's two request shapes and nothing else, and trusts them. bench/floor.py is the
same for production mode on PostgreSQL.
"""

import argparse
import sqlite3
import threading
import time

import orjson
from least_http import answer_all, listening

COLUMNS = (
    '"id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer",'
    ' "branch"'
)
PROMISE_COLUMNS = ("id", "state", "param", "value", "tags", "timeoutAt", "createdAt", "settledAt")
GET = f'SELECT {COLUMNS} FROM "promises_promise" WHERE "id" = ?'
INSERT_PROMISE = (
    f"INSERT INTO \"promises_promise\" ({COLUMNS}) VALUES (?, 'pending', ?, '{{}}', ?, ?, ?, NULL, 1, 0, NULL)"
)
INSERT_TASK = (
    'INSERT INTO "tasks_task" ("id", "state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at")'
    " VALUES (?, 'pending', 0, NULL, NULL, '[]', 0, ?)"
)
INSERT_MESSAGE = (
    'INSERT INTO "outbox_message" ("key", "kind", "subject", "address", "data", "created_at", "state", "attempts",'
    ' "next_attempt_at", "delivered_at", "unreached_since", "last_error")'
    " VALUES (?, 'execute', ?, ?, ?, ?, 'pending', 1, ?, ?, ?, 'no live poll connection for this address')"
    ' ON CONFLICT ("key") DO UPDATE SET "address" = EXCLUDED."address", "data" = EXCLUDED."data",'
    ' "created_at" = EXCLUDED."created_at", "state" = EXCLUDED."state", "attempts" = EXCLUDED."attempts",'
    ' "next_attempt_at" = EXCLUDED."next_attempt_at", "delivered_at" = EXCLUDED."delivered_at",'
    ' "unreached_since" = EXCLUDED."unreached_since", "last_error" = EXCLUDED."last_error"'
)
WRITER = threading.Lock()


def now_ms():
    return time.time_ns() // 1_000_000


def promise(row):
    data = dict(zip(PROMISE_COLUMNS, row[:8], strict=True))
    for key in ("param", "value", "tags"):
        data[key] = orjson.loads(data[key])
    return data


class Handlers:
    def __init__(self, database):
        self.db = sqlite3.connect(database, isolation_level=None, check_same_thread=False, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")

    def answer(self, kind, data):
        return getattr(self, kind.replace(".", "_"))(data)

    def promise_get(self, data):
        with WRITER:  # as the server runs a get: in a transaction of its own (it may write a timeout's transition)
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute(GET, (data["id"],)).fetchone()
            self.db.execute("COMMIT")
        return {"promise": promise(row)}

    def promise_create(self, data):
        now, id, target = now_ms(), data["id"], data["tags"]["resonate:target"]
        message = orjson.dumps({"task": {"id": id, "version": 0}}).decode()
        with WRITER:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute(GET, (id,)).fetchone()
            if row is None:
                param, tags = orjson.dumps(data["param"]).decode(), orjson.dumps(data["tags"]).decode()
                self.db.execute(INSERT_PROMISE, (id, param, tags, data["timeoutAt"], now))
                self.db.execute(INSERT_TASK, (id, now + 5_000))
                self.db.execute(INSERT_MESSAGE, ("e:" + id, id, target, message, now, now + 10_000, None, now))
            self.db.execute("COMMIT")
        if row is not None:
            return {"promise": promise(row)}
        return {
            "promise": {
                "id": id,
                "state": "pending",
                "param": data["param"],
                "value": {},
                "tags": data["tags"],
                "timeoutAt": data["timeoutAt"],
                "createdAt": now,
            }
        }


def serve(connection, database):
    handlers = Handlers(database)
    try:
        answer_all(connection, handlers)
    finally:
        handlers.db.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database", required=True, help="the path of a migrated SQLite database")
    args = parser.parse_args()
    listener = listening(args.port)
    while True:  # run.py stops the whole process group
        connection, _ = listener.accept()
        threading.Thread(target=serve, args=(connection, args.database), daemon=True).start()


if __name__ == "__main__":
    main()
