"""Creates of several protocol threads in one statement (rows.insert_unless_exists, floor.batching), on PostgreSQL:
each request is answered as if it had come alone, a row the database refuses fails only its own request, and a
statement whose connection is lost leaves each of its creates to be retried, none of them half-written."""

import threading
import time

import orjson
import pytest
from django.db import DataError, connection, connections, transaction

from floor import batching, rows, transactions
from floor.outages import lost_connection
from outbox.models import Message
from promises.engine import create
from promises.models import Promise
from resonate_site.protocol.envelope import respond
from tasks.models import Task
from tests.test_together import committed_together

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

FAR = 4102444800000
TARGET = {"resonate:target": "poll://any@default"}
SHAPE = (Promise, (Task, Message), "default")  # a promise created with its task and execute message


def body(id, param=None):
    data = {"id": id, "timeoutAt": FAR, "param": param or {"data": id}, "tags": TARGET}
    return orjson.dumps({"kind": "promise.create", "head": {"corrId": id, "version": "2026-04-01"}, "data": data})


def eventually(check, timeout=20):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.01)


class ProtocolThreads:
    """Threads that send creates together, as a server process's protocol threads do, each running one call."""

    def __init__(self):
        self.results, self.threads = {}, []

    def start(self, name, call, settled):
        def run():
            rows.send_creates_together()
            try:
                self.results[name] = call()
            except Exception as error:
                self.results[name] = error
            finally:
                connections.close_all()

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)
        eventually(settled)

    def join(self):
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive()
        return self.results


def waiting(count):
    return lambda: len(rows._together.waiting.get(SHAPE, ())) == count


def blocked_on_a_lock(count=1):
    """`count` of this database's create statements wait for a row lock (the gate's)."""

    def check():
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
                " AND query LIKE 'WITH head AS%%'"
            )
            return cursor.fetchone()[0] == count

    return check


@pytest.fixture
def gate():
    """A promise row inserted by a transaction left open on a connection of its own: a create of its id waits for
    that transaction (ON CONFLICT), holding its statement in flight. open_gate() rolls it back."""
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = False

    def close(id):
        raw.execute(
            "INSERT INTO promises_promise (id, state, param, value, tags, timeout_at, created_at, timeout_armed, timer)"
            " VALUES (%s, 'pending', '{}', '{}', '{}', %s, 1, false, false)",
            [id, FAR],
        )

    yield close, raw.rollback
    raw.rollback()
    raw.close()


@pytest.fixture
def one_in_flight(monkeypatch):
    monkeypatch.setattr(batching, "IN_FLIGHT", 1)  # all that wait go in the next statement


def test_creates_that_wait_together_go_in_one_statement_and_each_is_answered_as_alone(gate, one_in_flight):
    close_gate, open_gate = gate
    assert respond(body("old", {"data": "first"}))[0] == 200
    before = committed_together()
    threads = ProtocolThreads()
    close_gate("gate")

    threads.start("gate", lambda: respond(body("gate")), settled=blocked_on_a_lock())
    for n, name in enumerate(["a", "old", "dup-1", "dup-2", "b"], 1):
        id = name.split("-")[0]
        threads.start(name, lambda id=id: respond(body(id)), settled=waiting(n))
    open_gate()
    replies = {name: (status, orjson.loads(reply)) for name, (status, reply) in threads.join().items()}

    assert {status for status, _ in replies.values()} == {200}
    promises = {name: reply["data"]["promise"] for name, (_, reply) in replies.items()}
    assert promises["old"]["param"] == {"data": "first"}  # the existing promise, as it was created
    assert promises["a"]["param"] == {"data": "a"} and promises["b"]["param"] == {"data": "b"}
    assert promises["dup-1"] == promises["dup-2"]  # one of them created it, the other read it
    for id in ["gate", "a", "b", "dup"]:
        assert Task.objects.filter(promise_id=id, state="pending").exists()
        assert Message.objects.filter(key=f"e:{id}", kind="execute").exists()
    # a, b and one dup in one statement (the other dup waited for the next: one key never twice in a statement)
    assert committed_together() - before == 3


def test_a_row_the_database_refuses_fails_only_its_own_create(gate, one_in_flight):
    close_gate, open_gate = gate
    threads = ProtocolThreads()
    close_gate("gate")

    def created(id, param=None):
        return lambda: create(id, param or {}, TARGET, FAR, 1)

    threads.start("gate", created("gate"), settled=blocked_on_a_lock())
    threads.start("a", created("a"), settled=waiting(1))
    # jsonb takes no NUL: the database refuses this row (POST / refuses it before, as a 400)
    threads.start("bad", created("bad", {"data": "\u0000"}), settled=waiting(2))
    threads.start("b", created("b"), settled=waiting(3))
    open_gate()
    results = threads.join()

    assert isinstance(results.pop("bad"), DataError)
    assert {name: creation.existing for name, creation in results.items()} == {"gate": None, "a": None, "b": None}
    assert set(Promise.objects.values_list("id", flat=True)) == {"gate", "a", "b"}
    assert not Task.objects.filter(promise_id="bad").exists() and not Message.objects.filter(key="e:bad").exists()


def test_a_statement_whose_connection_is_lost_leaves_each_of_its_creates_to_run_again(gate, one_in_flight):
    close_gate, open_gate = gate
    threads = ProtocolThreads()
    close_gate("first")
    close_gate("second")

    def created(id):
        return lambda: create(id, {}, TARGET, FAR, 1)

    threads.start("first", created("first"), settled=blocked_on_a_lock())
    threads.start("second", created("second"), settled=waiting(1))  # leads the next statement, which waits too
    threads.start("c", created("c"), settled=waiting(2))
    threads.start("d", created("d"), settled=waiting(3))
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'WITH head AS%%'")
    eventually(lambda: len(threads.results) >= 1)  # the first statement's thread has heard
    eventually(blocked_on_a_lock(1))  # second, c and d: one statement, on second's connection
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'WITH head AS%%'")
    open_gate()
    results = threads.join()

    assert set(results) == {"first", "second", "c", "d"}
    for name, error in results.items():
        assert isinstance(error, Exception) and lost_connection(error), (name, error)
    assert list(Promise.objects.values_list("id", flat=True)) == [] and not Task.objects.exists()
    assert not Message.objects.exists()


def test_a_request_whose_create_went_in_a_statement_lost_elsewhere_runs_again_on_its_own_connection(
    gate, one_in_flight, monkeypatch
):
    """Its rows may have committed, so its create runs again as after a lost connection (run_atomically), but on its
    own connection, which nothing put in question: not closed, and the database not taken for troubled."""
    monkeypatch.setattr(transactions, "_troubled_until", 0.0)
    close_gate, open_gate = gate
    threads = ProtocolThreads()
    close_gate("first")
    close_gate("second")

    def backend():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    def follow():
        before = backend()  # its connection, opened before its create
        status, reply = respond(body("c"))
        return before, status, orjson.loads(reply), backend()

    threads.start("first", lambda: create("first", {}, TARGET, FAR, 1), settled=blocked_on_a_lock())
    threads.start("second", lambda: create("second", {}, TARGET, FAR, 1), settled=waiting(1))
    threads.start("c", follow, settled=waiting(2))
    terminate = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'WITH head AS%%'"
    )
    with connections["default"].cursor() as cursor:
        cursor.execute(terminate)
    eventually(lambda: "first" in threads.results)
    eventually(blocked_on_a_lock(1))  # second and c: one statement, on second's connection
    with connections["default"].cursor() as cursor:
        cursor.execute(terminate)
    results = threads.join()
    open_gate()

    assert lost_connection(results["second"]) and not isinstance(results["second"], rows.LostElsewhere)
    before, status, reply, after = results["c"]
    assert status == 200 and reply["data"]["promise"]["id"] == "c" and reply["data"]["promise"]["state"] == "pending"
    assert before == after  # the same connection
    assert not transactions.database_troubled()
    assert Task.objects.filter(promise_id="c").exists() and Message.objects.filter(key="e:c").exists()


def test_a_thread_that_does_not_send_creates_together_never_waits_for_a_statement_in_flight(gate, one_in_flight):
    close_gate, open_gate = gate
    threads = ProtocolThreads()
    close_gate("gate")
    threads.start("gate", lambda: respond(body("gate")), settled=blocked_on_a_lock())

    def in_a_transaction():
        rows.send_creates_together()
        with transaction.atomic():  # its statement is part of a transaction: never sent with others
            return create("in-transaction", {}, TARGET, FAR, 1)

    threads.start("in-transaction", in_a_transaction, settled=lambda: "in-transaction" in threads.results)
    others = threading.Thread(target=lambda: threads.results.update(alone=respond(body("alone"))))
    others.start()  # this thread never sends creates together: its statement goes at once, beside the one in flight
    others.join(20)

    assert threads.results["alone"][0] == 200 and threads.results["in-transaction"].existing is None
    open_gate()
    assert threads.join()["gate"][0] == 200


def test_a_thread_left_waiting_behind_a_slow_statement_sends_its_own(gate, one_in_flight, monkeypatch):
    close_gate, open_gate = gate
    monkeypatch.setattr(batching, "WAIT_S", 0.2)
    threads = ProtocolThreads()
    close_gate("gate")
    threads.start("gate", lambda: respond(body("gate")), settled=blocked_on_a_lock())

    threads.start("later", lambda: respond(body("later")), settled=lambda: "later" in threads.results)

    assert threads.results["later"][0] == 200  # answered while the statement before it still waits
    assert Promise.objects.filter(id="later").exists() and not Promise.objects.filter(id="gate").exists()
    open_gate()
    assert threads.join()["gate"][0] == 200
