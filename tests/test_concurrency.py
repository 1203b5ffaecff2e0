"""Many clients racing on the same few ids over real HTTP: no 5xx, one winner per race, invariants intact."""

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.core.servers.basehttp import WSGIRequestHandler, WSGIServer

from floor.clock import now_ms
from tests.conformance.invariants import violations

THREADS = 16
TARGET = "poll://any@default"
FAR = 2**62


class Client:
    def __init__(self, url):
        self.http = httpx.Client(base_url=url, timeout=60)
        self.sent = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.http.close()  # lets the live server's thread (and its database connection) finish

    def __call__(self, kind, data):
        self.sent += 1
        head = {"corrId": f"{threading.get_ident()}-{self.sent}", "version": "2026-04-01"}
        response = self.http.post("/", json={"kind": kind, "head": head, "data": data})
        envelope = response.json()
        assert response.status_code == envelope["head"]["status"]
        assert response.status_code < 500, envelope
        return response.status_code, envelope["data"]


def race(url, work, count=THREADS):
    """Run work(client, n) on `count` threads released at the same moment; their results in order."""
    start = threading.Barrier(count)

    def run(n):
        with Client(url) as client:
            start.wait()
            return work(client, n)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


@pytest.fixture(scope="session")
def racing_live_server():
    """Django's live server, set for races of THREADS clients before it starts (pytest-django's is one a session).

    Its listening socket takes 10 connections waiting (Django's WSGIServer): the rest of THREADS connecting at once
    had their SYN dropped and sent again a second later, so each race took over a second and its requests did not
    overlap. And it writes an answer's head and body apart: with Nagle's algorithm on, the body waited for the
    client's delayed ACK of the head, 40 ms a request."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WSGIServer, "request_queue_size", 4 * THREADS)
        patch.setattr(WSGIRequestHandler, "disable_nagle_algorithm", True)
        yield


@pytest.fixture
def server(racing_live_server, live_server, settings):
    return live_server.url


@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_of_one_id_all_get_the_same_promise(server):
    results = race(
        server, lambda rpc, n: rpc("promise.create", {"id": "p", "timeoutAt": FAR, "param": {"data": str(n)}})
    )
    assert {status for status, _ in results} == {200}
    assert len({str(data["promise"]) for _, data in results}) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_task_creates_acquire_the_task_exactly_once(server):
    def create(rpc, n):
        action = {
            "kind": "promise.create",
            "head": {},
            "data": {"id": "wf", "timeoutAt": FAR, "tags": {"resonate:target": TARGET}},
        }
        return rpc("task.create", {"pid": f"w{n}", "ttl": 60_000, "action": action})

    results = race(server, create)
    winners = [data for status, data in results if status == 200]
    assert len(winners) == 1 and winners[0]["task"]["state"] == "acquired" and winners[0]["task"]["version"] == 1
    assert sorted(status for status, _ in results) == [200] + [409] * (THREADS - 1)


@pytest.mark.django_db(transaction=True)
def test_concurrent_settles_agree_on_one_value(server):
    with Client(server) as rpc:
        rpc("promise.create", {"id": "p", "timeoutAt": FAR})
    results = race(
        server, lambda rpc, n: rpc("promise.settle", {"id": "p", "state": "resolved", "value": {"data": str(n)}})
    )
    values = {data["promise"]["value"]["data"] for _, data in results}
    assert {status for status, _ in results} == {200} and len(values) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_fences_creating_one_targeted_child_all_get_it(server):
    """A client retrying a fence while the first is in flight: a later request may find the child's task
    committed after its locks were taken, without the child's promise among them; that task is not its own."""
    with Client(server) as rpc:
        action = {"kind": "promise.create", "head": {}, "data": {"id": "wf", "timeoutAt": FAR}}
        rpc("task.create", {"pid": "w", "ttl": 600_000, "action": action})

    for child in range(1, 6):  # the window is narrow: race for a few new children

        def fence(rpc, n, child=f"wf.{child}"):
            data = {"id": child, "timeoutAt": FAR, "tags": {"resonate:target": TARGET}}
            action = {"kind": "promise.create", "head": {}, "data": data}
            return rpc("task.fence", {"id": "wf", "version": 1, "action": action})

        results = race(server, fence)
        assert {status for status, _ in results} == {200}
        assert {data["action"]["data"]["promise"]["id"] for _, data in results} == {f"wf.{child}"}


@pytest.mark.django_db(transaction=True)
def test_concurrent_acquires_of_one_version_have_one_winner(server):
    with Client(server) as rpc:
        rpc("promise.create", {"id": "wf", "timeoutAt": FAR, "tags": {"resonate:target": TARGET}})
    results = race(
        server, lambda rpc, n: rpc("task.acquire", {"id": "wf", "version": 0, "pid": f"w{n}", "ttl": 60_000})
    )
    assert sorted(status for status, _ in results) == [200] + [409] * (THREADS - 1)


@pytest.mark.django_db(transaction=True)
def test_a_storm_of_mixed_operations_leaves_consistent_state(server, settings):
    """Children settle while their parent suspends on them, tasks are acquired, fulfilled and released."""
    settings.RESONATE = {**settings.RESONATE, "DEBUG": True}
    ids = ["wf", "wf.1", "wf.2", "wf.3", "x"]

    def storm(rpc, n):
        rng = random.Random(n)
        for _ in range(40):
            operate(rpc, rng, rng.choice(ids), ids)

    race(server, storm)
    with Client(server) as rpc:
        status, snap = rpc("debug.snap", {})
    assert status == 200
    assert violations(snap, {}) == []
    tasks = {t["id"]: t for t in snap["tasks"]}
    for promise in snap["promises"]:
        if promise["state"] != "pending" and promise["id"] in tasks:
            assert tasks[promise["id"]]["state"] == "fulfilled", promise["id"]


def operate(rpc, rng, id, ids):
    """One random operation; every answer must be a protocol answer, never a 5xx (Client checks)."""
    version = rng.randint(0, 3)
    kind = rng.choice(["create", "settle", "acquire", "fulfill", "suspend", "release", "task.create", "heartbeat"])
    if kind == "create":
        rpc("promise.create", {"id": id, "timeoutAt": FAR, "tags": {"resonate:target": TARGET}})
    elif kind == "settle":
        rpc("promise.settle", {"id": id, "state": "resolved"})
    elif kind == "acquire":
        rpc("task.acquire", {"id": id, "version": version, "pid": "w", "ttl": 60_000})
    elif kind == "fulfill":
        action = {"kind": "promise.settle", "head": {}, "data": {"id": id, "state": "rejected"}}
        rpc("task.fulfill", {"id": id, "version": version, "action": action})
    elif kind == "suspend":
        awaited = rng.sample(ids, 2)
        actions = [
            {"kind": "promise.register_callback", "head": {}, "data": {"awaited": a, "awaiter": id}} for a in awaited
        ]
        rpc("task.suspend", {"id": id, "version": version, "actions": actions})
    elif kind == "release":
        rpc("task.release", {"id": id, "version": version})
    elif kind == "task.create":
        action = {
            "kind": "promise.create",
            "head": {},
            "data": {"id": id, "timeoutAt": FAR, "tags": {"resonate:target": TARGET}},
        }
        rpc("task.create", {"pid": "w", "ttl": 60_000, "action": action})
    else:
        rpc("task.heartbeat", {"pid": "w", "tasks": [{"id": i, "version": version} for i in rng.sample(ids, 3)]})


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_that_waits_for_a_settling_transaction_renews_nothing_it_finished(server):
    """task.heartbeat renews by one statement (TaskQuerySet.renew_leases) that locks the promise first, as every
    task write does: a heartbeat blocked behind a fulfilment must find the task fulfilled, not give it a lease."""
    import psycopg
    from django.db import connection

    with Client(server) as rpc:
        action = {"kind": "promise.create", "head": {}, "data": {"id": "hb", "timeoutAt": FAR}}
        status, created = rpc("task.create", {"pid": "w", "ttl": 60_000, "action": action})
        assert status == 200
        version = created["task"]["version"]
        dsn = connection.get_connection_params()
        with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}) as holder:
            holder.execute("SELECT 1 FROM promises_promise WHERE id = 'hb' FOR UPDATE")  # as task.fulfill does first
            with ThreadPoolExecutor(1) as pool, Client(server) as other:
                beat = pool.submit(other, "task.heartbeat", {"pid": "w", "tasks": [{"id": "hb", "version": version}]})
                time.sleep(0.5)
                assert not beat.done(), "the heartbeat did not wait for the promise's lock"
                holder.execute("UPDATE promises_promise SET state = 'resolved', settled_at = 1 WHERE id = 'hb'")
                holder.execute(
                    "UPDATE tasks_task SET state = 'fulfilled', pid = NULL, ttl = NULL, timeout_kind = NULL,"
                    " timeout_at = NULL WHERE id = 'hb'"
                )
                holder.commit()
                assert beat.result(timeout=10)[0] == 200
        status, task = rpc("task.get", {"id": "hb"})
        assert task["task"]["state"] == "fulfilled"
        with connection.cursor() as cursor:
            cursor.execute("SELECT timeout_kind, timeout_at FROM tasks_task WHERE id = 'hb'")
            assert cursor.fetchone() == (None, None)


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_renews_a_lease_to_what_acquiring_would_and_saturates_at_the_largest_time(server):
    from django.db import connection

    from floor.protocol import I64_MAX

    with Client(server) as rpc:
        for id, ttl in (("short", 30_000), ("huge", I64_MAX)):
            action = {"kind": "promise.create", "head": {}, "data": {"id": id, "timeoutAt": FAR}}
            assert rpc("task.create", {"pid": "w", "ttl": ttl, "action": action})[0] == 200
        before = now_ms()  # the server's own clock: whole milliseconds, never behind what it read before
        refs = [{"id": "short", "version": 1}, {"id": "huge", "version": 1}, {"id": "absent", "version": 1}]
        assert rpc("task.heartbeat", {"pid": "w", "tasks": refs})[0] == 200
        after = now_ms()
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, timeout_kind, timeout_at FROM tasks_task ORDER BY id")
            leases = {id: (kind, at) for id, kind, at in cursor.fetchall()}
    assert leases["huge"] == (1, I64_MAX)
    assert leases["short"][0] == 1 and before + 30_000 <= leases["short"][1] <= after + 30_000


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("registration", ["listener", "callback"])
@pytest.mark.parametrize("settling", ["promise.settle", "task.fulfill"])
def test_a_settle_that_waited_for_a_registering_transaction_takes_what_it_registered(
    server, registration, settling, monkeypatch
):
    """promise.settle and task.fulfill ask whether anything is registered on the promise once they hold the
    promise's lock (promises.engine.settle_if, then PromiseQuerySet.locked_to_settle or TaskQuerySet.locked_to_settle),
    and only a promise with nothing registered is settled there, or has its writes sent with the commit, with no
    listener taken and no awaiter resumed. Asked in the locking statement's own snapshot, taken
    before the wait, the answer would miss a registration committed by the transaction it waited for: the
    listener would get no unblock, and the callback would be left behind."""
    import psycopg
    from django.db import connection

    from outbox.models import Message
    from promises.models import Callback, Listener
    from tasks import handlers

    monkeypatch.setattr(handlers, "FULFILLS", handlers.Hunch())  # task.fulfill's first step tried

    with Client(server) as rpc:
        if settling == "promise.settle":
            assert rpc("promise.create", {"id": "rs", "timeoutAt": FAR})[0] == 200
            request = {"id": "rs", "state": "resolved", "value": {}}
        else:
            action = {"kind": "promise.create", "head": {}, "data": {"id": "rs", "timeoutAt": FAR}}
            status, created = rpc("task.create", {"pid": "w", "ttl": 60_000, "action": action})
            assert status == 200
            settle = {"kind": "promise.settle", "head": {}, "data": {"id": "rs", "state": "resolved", "value": {}}}
            request = {"id": "rs", "version": created["task"]["version"], "action": settle}
        assert rpc("promise.create", {"id": "rs-awaiter", "timeoutAt": FAR})[0] == 200
        dsn = connection.get_connection_params()
        with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}) as holder:
            holder.execute("SELECT 1 FROM promises_promise WHERE id = 'rs' FOR UPDATE")  # as a registration does
            if registration == "listener":
                holder.execute("INSERT INTO promises_listener (promise_id, address) VALUES ('rs', 'poll://uni@g/w')")
            else:
                holder.execute("INSERT INTO promises_callback (awaited_id, awaiter_id) VALUES ('rs', 'rs-awaiter')")
            with ThreadPoolExecutor(1) as pool, Client(server) as other:
                settle = pool.submit(other, settling, request)
                time.sleep(0.5)
                assert not settle.done(), "the settle did not wait for the promise's lock"
                holder.commit()
                assert settle.result(timeout=10)[0] == 200
        assert rpc("promise.get", {"id": "rs"})[1]["promise"]["state"] == "resolved"
    assert not Listener.objects.filter(promise_id="rs").exists()
    assert not Callback.objects.filter(awaited_id="rs").exists()
    if registration == "listener":
        assert Message.objects.filter(kind="unblock", address="poll://uni@g/w").count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_settle_that_waited_for_a_settling_transaction_leaves_its_value_as_it_was(server):
    """settle_at_once writes only if the promise is live once its lock is held: a settle that waited for another
    settlement of the promise answers with that settlement's state and value, and writes nothing (the first
    settle wins). Decided in the locking statement's snapshot, taken before the wait, it would overwrite them."""
    import psycopg
    from django.db import connection

    with Client(server) as rpc:
        assert rpc("promise.create", {"id": "ss", "timeoutAt": FAR})[0] == 200
        dsn = connection.get_connection_params()
        with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}) as holder:
            holder.execute("SELECT 1 FROM promises_promise WHERE id = 'ss' FOR UPDATE")  # as a settlement does
            holder.execute(
                "UPDATE promises_promise SET state = 'rejected', value = '{\"data\": \"Zmlyc3Q=\"}',"
                " settled_at = 1, timeout_armed = false WHERE id = 'ss'"
            )
            with ThreadPoolExecutor(1) as pool, Client(server) as other:
                value = {"data": "c2Vjb25k"}
                settle = pool.submit(other, "promise.settle", {"id": "ss", "state": "resolved", "value": value})
                time.sleep(0.5)
                assert not settle.done(), "the settle did not wait for the promise's lock"
                holder.commit()
                status, settled = settle.result(timeout=10)
        assert status == 200
        assert settled["promise"]["state"] == "rejected" and settled["promise"]["value"]["data"] == "Zmlyc3Q=", settled
        status, read = rpc("promise.get", {"id": "ss"})
    assert read["promise"]["state"] == "rejected" and read["promise"]["settledAt"] == 1, read


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("holder_did", ["release", "acquire again"])
def test_a_fulfill_that_waited_for_the_promises_lock_is_refused_a_task_it_no_longer_holds(
    server, holder_did, monkeypatch
):
    """task.fulfill's one query string (tasks.handlers.task_fulfill_at_once) asks whether the caller holds the task
    once the promise's lock is held, as every task write does: a fulfill blocked behind a release, or behind a lease
    expiry and another acquire, must get a 409 and leave the promise pending, not settle it for a holder that has
    lost the task. Asked in the locking statement's snapshot, taken before the wait, it would find the task still
    held."""
    import psycopg
    from django.db import connection

    from tasks import handlers

    monkeypatch.setattr(handlers, "FULFILLS", handlers.Hunch())  # its first step tried
    with Client(server) as rpc:
        action = {"kind": "promise.create", "head": {}, "data": {"id": "fl", "timeoutAt": FAR}}
        status, created = rpc("task.create", {"pid": "w", "ttl": 60_000, "action": action})
        assert status == 200
        version = created["task"]["version"]
        settle = {"kind": "promise.settle", "head": {}, "data": {"id": "fl", "state": "resolved", "value": {}}}
        dsn = connection.get_connection_params()
        with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}) as holder:
            holder.execute("SELECT 1 FROM promises_promise WHERE id = 'fl' FOR UPDATE")  # as every task write does
            if holder_did == "release":
                holder.execute("UPDATE tasks_task SET state = 'pending', pid = NULL, ttl = NULL WHERE id = 'fl'")
            else:
                holder.execute("UPDATE tasks_task SET version = version + 1, pid = 'other' WHERE id = 'fl'")
            with ThreadPoolExecutor(1) as pool, Client(server) as other:
                fulfilling = pool.submit(other, "task.fulfill", {"id": "fl", "version": version, "action": settle})
                time.sleep(0.5)
                assert not fulfilling.done(), "the fulfill did not wait for the promise's lock"
                holder.commit()
                status, refused = fulfilling.result(timeout=10)
        assert status == 409, refused
        assert rpc("promise.get", {"id": "fl"})[1]["promise"]["state"] == "pending"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_fulfill_that_waited_for_its_awaiters_lock_resumes_the_task_as_the_holder_left_it(server):
    """A settlement locks the awaiters it read under its own lock with its writes, and reads their tasks in a
    statement of its own once the locks are held (TaskQuerySet.locked_all_after). Read in the locking statement's
    snapshot, taken before the wait, a task suspended by the transaction it waited for would still look acquired:
    it would only be told of the resume, and never be executed again."""
    import psycopg
    from django.db import connection

    from outbox.models import Message

    with Client(server) as rpc:
        versions = {}
        for id in ("aw", "aw-child"):
            data = {"id": id, "timeoutAt": FAR, "tags": {"resonate:target": TARGET}}
            action = {"kind": "promise.create", "head": {}, "data": data}
            status, created = rpc("task.create", {"pid": "w", "ttl": 60_000, "action": action})
            assert status == 200
            versions[id] = created["task"]["version"]
        assert rpc("promise.register_callback", {"awaited": "aw-child", "awaiter": "aw"})[0] == 200
        settle = {"kind": "promise.settle", "head": {}, "data": {"id": "aw-child", "state": "resolved", "value": {}}}
        fulfil = {"id": "aw-child", "version": versions["aw-child"], "action": settle}
        dsn = connection.get_connection_params()
        with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}) as holder:
            holder.execute("SELECT 1 FROM promises_promise WHERE id = 'aw' FOR UPDATE")  # as task.suspend does
            holder.execute(
                "UPDATE tasks_task SET state = 'suspended', pid = NULL, ttl = NULL, timeout_kind = NULL,"
                " timeout_at = NULL WHERE id = 'aw'"
            )
            with ThreadPoolExecutor(1) as pool, Client(server) as other:
                fulfilled = pool.submit(other, "task.fulfill", fulfil)
                time.sleep(0.5)
                assert not fulfilled.done(), "the fulfill did not wait for the awaiter's lock"
                holder.commit()
                assert fulfilled.result(timeout=10)[0] == 200
        status, task = rpc("task.get", {"id": "aw"})
    assert task["task"]["state"] == "pending"
    assert Message.objects.filter(kind="execute", subject="aw").count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_acquire_that_waited_for_the_promises_lock_finds_the_task_as_the_holder_left_it(server):
    """task.acquire's one statement (tasks.engine.acquire_at_once) locks the promise before it writes the task,
    as every task write does: an acquire blocked behind a fulfilment must get a 409, not a lease on a task that is
    done; and the 409 says why, as the transaction that task_acquire then runs finds it."""
    import psycopg
    from django.db import connection

    with Client(server) as rpc:
        data = {"id": "acq", "timeoutAt": FAR, "tags": {"resonate:target": TARGET}}
        assert rpc("promise.create", data)[0] == 200
        status, got = rpc("task.get", {"id": "acq"})
        version = got["task"]["version"]
        dsn = connection.get_connection_params()
        with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}) as holder:
            holder.execute("SELECT 1 FROM promises_promise WHERE id = 'acq' FOR UPDATE")  # as task.fulfill does first
            with ThreadPoolExecutor(1) as pool, Client(server) as other:
                acquire = {"id": "acq", "version": version, "pid": "w", "ttl": 60_000}
                acquiring = pool.submit(other, "task.acquire", acquire)
                time.sleep(0.5)
                assert not acquiring.done(), "the acquire did not wait for the promise's lock"
                holder.execute("UPDATE promises_promise SET state = 'resolved', settled_at = 1 WHERE id = 'acq'")
                holder.execute(
                    "UPDATE tasks_task SET state = 'fulfilled', pid = NULL, ttl = NULL, timeout_kind = NULL,"
                    " timeout_at = NULL WHERE id = 'acq'"
                )
                holder.commit()
                status, refused = acquiring.result(timeout=10)
        assert status == 409
        status, got = rpc("task.get", {"id": "acq"})
    assert got["task"]["state"] == "fulfilled"


@pytest.mark.django_db(transaction=True)
def test_a_settle_racing_the_create_of_its_promise_answers_it_absent_or_settled(server):
    """Each round, one client creates a promise while another settles it. The settle answers 404 (it came first)
    or 200 with the promise settled, never a 5xx, and the promise ends as its answer said. On PostgreSQL a create
    that commits after settle_at_once's lock looked for the promise is visible to the writes that follow it in
    the same query string; those must not write what the lock does not hold (rows.lock_then_write)."""
    rounds = 100
    both = threading.Barrier(2)

    def work(rpc, n):
        answers = []
        try:
            for i in range(rounds):
                both.wait()
                if n == 0:
                    rpc("promise.create", {"id": f"r{i}", "timeoutAt": FAR})
                else:
                    answers.append(rpc("promise.settle", {"id": f"r{i}", "state": "resolved"}))
        except AssertionError:
            both.abort()  # the other client stops waiting for this one
            raise
        return answers

    _, settles = race(server, work, count=2)
    with Client(server) as rpc:
        for i, (status, data) in enumerate(settles):
            assert status in (200, 404), (status, data)
            _, read = rpc("promise.get", {"id": f"r{i}"})
            assert read["promise"]["state"] == ("resolved" if status == 200 else "pending"), (i, status, read)
            if status == 200:
                assert data["promise"]["state"] == "resolved", data


@pytest.mark.django_db(transaction=True)
def test_debug_start_answers_once_a_sweep_batch_under_way_has_committed_and_no_batch_fires_after_it(
    server, monkeypatch
):
    """A harness pauses the background (debug.start) to compare the stored state with its model's: nothing may fire
    once it has answered. A background sweep whose batch is under way as debug.start comes holds it off until that
    batch commits (on PostgreSQL the batch's FOR SHARE read of the pause against debug.start's table lock; on SQLite
    the one writer), and a batch after debug.start's write reads the pause and fires nothing."""
    from django.db import connection

    from timeouts import sweep as sweeping

    entered, release = threading.Event(), threading.Event()
    fire_promises = sweeping.TRANSITIONS["promise"]

    def held(ids, now):
        fire_promises(ids, now)
        entered.set()
        assert release.wait(10)

    with Client(server) as rpc:
        due_at = now_ms() + 300
        for id in ("first", "second"):
            timer = {"id": id, "timeoutAt": due_at, "tags": {"resonate:timer": "true"}}  # a timeout the sweep fires
            assert rpc("promise.create", timer)[0] == 200
        time.sleep(max(0, due_at - now_ms()) / 1000 + 0.05)
        monkeypatch.setitem(sweeping.TRANSITIONS, "promise", held)
        run_batch = sweeping.run_atomically

        def after_debug_start(run):  # the batches after the held one wait for debug.start's write (SQLite's writer
            if release.is_set():  # is not handed over in order of asking)
                time.sleep(0.3)
            return run_batch(run)

        monkeypatch.setattr(sweeping, "run_atomically", after_debug_start)

        def background():
            try:
                return sweeping.sweep(now_ms(), batch=1, clock=now_ms)
            finally:
                connection.close()

        with ThreadPoolExecutor(2) as pool, Client(server) as harness:
            swept = pool.submit(background)
            assert entered.wait(10), f"the sweep did not start: {swept.result(timeout=1)} fired"
            paused = pool.submit(harness, "debug.start", {})
            time.sleep(0.5)
            assert not paused.done(), "debug.start answered while a sweep's batch was under way"
            release.set()
            assert paused.result(timeout=10)[0] == 200
            _, as_paused = rpc("debug.snap", {})
            fired = swept.result(timeout=10)
        _, snap = rpc("debug.snap", {})
        assert snap == as_paused, "the sweep fired after debug.start answered"
        assert fired == 1
        assert sorted(p["state"] for p in snap["promises"]) == ["pending", "resolved"], snap["promises"]
        assert rpc("debug.stop", {})[0] == 200
