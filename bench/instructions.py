"""CPU instructions per protocol request, counted by valgrind (repeatable, unlike timings on a shared VM).

    .venv/bin/python bench/instructions.py [--database-url postgres://postgres@127.0.0.1:5432/resonate_bench]

Each operation runs n times under `valgrind --tool=callgrind`, for two values of n; the difference
divided by the difference in n is the cost of one request, startup cancelled out. By default a request
goes through the server's own path, resonate_site.asgi's application (the body read on the event loop,
respond() on the protocol's threads: validation, handler, database driver, reply), on uvloop's event loop as
under `manage.py serve` (uvicorn picks uvloop when it is installed; --loop asyncio for the standard one, which
runs of this script before 2026-12-02's fourth session used); --path django
sends it through Django's WSGI handler instead (middleware, the DRF view: the path the test client and
WSGI servers use). Not counted: the HTTP parsing of uvicorn, the delivery of the messages a request
writes (the deliverer thread of a server process), and the database server's own instructions. The start-up
heap is frozen before the count, as a server process freezes it (resonate_site.serving.freeze_startup_heap):
before 2026-12-06 a full garbage collection falling in the longer run put a count 20% high now and then. A count
still lands low now and then (something of the background falling in the shorter run): repeat one before trusting it.
Needs valgrind (apt-get install valgrind).
"""

import argparse
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = ("promise.create", "promise.get", "promise.settle", "task.create", "task.fulfill")
SMALL, LARGE = 20, 120
SEEDED = LARGE  # the same seeding in both runs, so it cancels out


def requests(operation, n, run):
    """n request bodies for one operation; creates and settles touch fresh ids from `run`."""
    import orjson

    def envelope(kind, data):
        return orjson.dumps({"kind": kind, "head": {"corrId": "i", "version": "2026-04-01"}, "data": data})

    target = {"resonate:target": "poll://any@bench"}
    for i in range(n):
        id = f"ins-{run}-{i}"
        if operation == "promise.create":
            yield envelope(operation, {"id": id, "timeoutAt": 4102444800000, "param": {"data": "e30="}, "tags": target})
        elif operation == "promise.get":
            yield envelope(operation, {"id": f"{run}-seed"})
        elif operation == "promise.settle":
            yield envelope(operation, {"id": f"{run}-seed-{i}", "state": "resolved", "value": {"data": "NDI="}})
        elif operation == "task.create":
            data = {"id": id, "timeoutAt": 4102444800000, "tags": target}
            action = {"kind": "promise.create", "head": {}, "data": data}
            yield envelope(operation, {"pid": "p", "ttl": 60000, "action": action})
        else:
            settle = {"kind": "promise.settle", "head": {}, "data": {"id": f"{run}-seed-{i}", "state": "resolved"}}
            yield envelope(operation, {"id": f"{run}-seed-{i}", "version": 1, "action": settle})


def seed(operation, n, run, app):
    """What the measured requests need to find: a promise to read, pending promises, acquired tasks."""
    import orjson

    def call(body):
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/",
            "SERVER_NAME": "bench",
            "SERVER_PORT": "80",
            "wsgi.input": io.BytesIO(body),
            "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "application/json",
            "wsgi.url_scheme": "http",
            "HTTP_HOST": "127.0.0.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
        }
        return b"".join(app(environ, lambda status, headers: None))

    def envelope(kind, data):
        return orjson.dumps({"kind": kind, "head": {"corrId": "s", "version": "2026-04-01"}, "data": data})

    call(envelope("promise.create", {"id": f"{run}-seed", "timeoutAt": 4102444800000}))
    for i in range(SEEDED if operation in ("promise.settle", "task.fulfill") else 0):
        data = {"id": f"{run}-seed-{i}", "timeoutAt": 4102444800000, "tags": {"resonate:target": "poll://any@b"}}
        if operation == "task.fulfill":
            action = {"kind": "promise.create", "data": data}
            call(envelope("task.create", {"pid": "p", "ttl": 60000, "action": action}))
        else:
            call(envelope("promise.create", data))
    return call


def asgi_caller(loop_kind):
    """POST / through resonate_site.asgi.application, on an event loop of this process: a function of a list of
    bodies, answering them one after another within one run of the loop, as a server process's loop runs for good.
    (A run of uvloop's loop per request, as before 2026-12-06 19:40, set up its signal handling each time, a
    socketpair among it: about 14 µs a request that no server spends.)"""
    import asyncio

    import uvloop

    from resonate_site.asgi import application

    loop = uvloop.new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()

    async def call(body):
        headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
        headers.append((b"content-length", str(len(body)).encode()))
        scope = {"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""}
        incoming, sent = [{"type": "http.request", "body": body, "more_body": False}], []

        async def receive():
            return incoming.pop() if incoming else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        await application(scope, receive, send)
        return b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")

    async def call_all(bodies):
        return [await call(body) for body in bodies]

    return lambda bodies: loop.run_until_complete(call_all(bodies))


def child(operation, n, path, loop_kind):
    """Runs inside valgrind: set up, seed, then the n measured requests (only those are toggled on)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")
    sys.path.insert(0, str(ROOT))
    from django.core.wsgi import get_wsgi_application

    app = get_wsgi_application()
    run = f"{os.getpid()}-{time.time_ns()}"
    call = seed(operation, n, run, app)
    answer_all = asgi_caller(loop_kind) if path == "asgi" else lambda bodies: [call(body) for body in bodies]
    answer_all(list(requests(operation, 3, f"{run}-warm")))  # warm caches on ids of their own
    from resonate_site.serving import freeze_startup_heap

    freeze_startup_heap()  # as a server process does once started: no full collection walks 100,000 objects mid-count
    for answer in answer_all(list(requests(operation, n, run))):
        assert b'"status":200' in answer, answer


def count(operation, n, database_url, path, loop_kind):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}/cg",
                sys.executable,
                __file__,
                "--child",
                operation,
                str(n),
                path,
                loop_kind,
            ],
            env={**os.environ, "DATABASE_URL": database_url, "PYTHONHASHSEED": "0"},
            check=True,
            capture_output=True,
        )
        summary = next(line for line in Path(out, "cg").read_text().splitlines() if line.startswith("summary:"))
    return int(re.search(r"\d+", summary).group())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/resonate_bench")
    parser.add_argument("--only", help="comma-separated operations")
    parser.add_argument("--path", choices=("asgi", "django"), default="asgi", help="the server's own, or Django's")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="the server's event loop")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2], args.child[3])
        return
    for operation in args.only.split(",") if args.only else OPERATIONS:
        small = count(operation, SMALL, args.database_url, args.path, args.loop)
        large = count(operation, LARGE, args.database_url, args.path, args.loop)
        print(f"{operation:16} {(large - small) / (LARGE - SMALL) / 1e6:6.2f} M instructions per request", flush=True)


if __name__ == "__main__":
    sys.exit(main())
