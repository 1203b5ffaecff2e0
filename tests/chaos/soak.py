"""Longer fault runs, by hand, for the races the fault suite can only sample (not collected by pytest).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python -m tests.chaos.soak streams
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python -m tests.chaos.soak broker

`streams`: production mode (tests/chaos/conftest.Deployment), three timer listeners, timers with a listener
registered at --rate a second, and one listener's stream cut every 0.3 to 1.2 s for --seconds; then every due
unblock must arrive. Prints how many were lost and where the lost ones' messages stand.

`broker`: an unsupervised Celery worker and Beat on a Redis of their own; Redis killed for 0.2 to 4 s and back
for 0.3 to 5 s, --rounds times; the worker must still be running at the end.
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")


def streams(seconds, rate):
    import django

    django.setup()
    import psycopg

    from tests.chaos.conftest import Deployment
    from tests.chaos.load import Rpc, SseClient, now_ms

    deployment = Deployment(tempfile.mkdtemp(prefix="soak-streams-"))
    deployment.start()
    try:
        group, got, lock = f"soak-{uuid.uuid4().hex[:6]}", Counter(), threading.Lock()

        def received(event):
            if event["kind"] == "unblock":
                with lock:
                    got[event["data"]["promise"]["id"]] += 1

        listeners = [SseClient("127.0.0.1", deployment.port, group, f"l{n}", received) for n in range(3)]
        for listener in listeners:
            assert listener.connected.wait(20)
        until = time.monotonic() + seconds

        def cut():
            while time.monotonic() < until:
                time.sleep(random.uniform(0.3, 1.2))
                random.choice(listeners).reset()

        threading.Thread(target=cut, daemon=True).start()
        rpc, due, n = Rpc(deployment.url), {}, 0
        while time.monotonic() < until:
            n += 1
            id, listener = f"{group}-t{n}", f"l{n % 3}"
            timer = {"id": id, "timeoutAt": now_ms() + random.randint(200, 800), "tags": {"resonate:timer": "true"}}
            rpc("promise.create", timer)
            _, data = rpc("promise.register_listener", {"awaited": id, "address": f"poll://uni@{group}/{listener}"})
            if data["promise"]["state"] == "pending":
                due[id] = listener
            time.sleep(1 / rate)
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and any(id not in got for id in due):
            time.sleep(0.5)
        lost = [id for id in due if id not in got]
        print(
            f"timers due {len(due)}, lost {len(lost)}, received twice {sum(c > 1 for c in got.values())},"
            f" reconnects {sum(listener.connects for listener in listeners)}"
        )
        if lost:
            print("lost, by listener:", dict(Counter(due[id] for id in lost)))
            with psycopg.connect(deployment.direct_url) as connection:
                query = "SELECT state, count(*) FROM outbox_message WHERE subject = ANY(%s) GROUP BY 1"
                print("their messages:", connection.execute(query, [lost]).fetchall())
        return not lost
    finally:
        deployment.stop()


def broker(rounds):
    import psycopg

    from tests.e2e.conftest import production_env
    from tests.e2e.servers import ROOT, Process, runtime_python
    from tests.faults import OwnRedis

    directory = Path(tempfile.mkdtemp(prefix="soak-broker-"))
    name, admin = f"resonate_soak_{uuid.uuid4().hex[:8]}", "host=127.0.0.1 user=postgres dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url = f"postgres://postgres@127.0.0.1:5432/{name}"
    subprocess.run([runtime_python(), "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env={**os.environ, "DATABASE_URL": url})  # fmt: skip
    redis = OwnRedis(directory).start()
    env = production_env(url, redis.url, RESONATE_SWEEP_PERIOD_MS="1000")
    celery = ["-m", "celery", "-A", "resonate_site"]
    log = directory / "w.log"
    worker = Process([*celery, "worker", "--concurrency", "2", "--loglevel", "info"], env, log, runtime_python())
    beat = Process([*celery, "beat", "--schedule", str(directory / "schedule")], env, directory / "b.log",
                   runtime_python())  # fmt: skip
    try:
        time.sleep(8)
        for round in range(rounds):
            redis.kill()
            time.sleep(random.uniform(0.2, 4))
            redis.start()
            time.sleep(random.uniform(0.3, 5))
            if worker.popen.poll() is not None:
                print(f"the worker exited in round {round + 1} of {rounds}; see {log}")
                return False
        text = log.read_text()
        print(f"the worker rode out {rounds} outages; it let reserved wake-ups go "
              f"{text.count('could not take back reserved wake-ups')} times")  # fmt: skip
        return True
    finally:
        beat.stop()
        worker.stop()
        redis.stop()
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("soak", choices=["streams", "broker"])
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--rate", type=float, default=40)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    ok = streams(args.seconds, args.rate) if args.soak == "streams" else broker(args.rounds)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
