"""Database behaviour the protocol relies on: connections that die, announcements made on commit."""

import re
import threading
import time

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st

from floor import functions, rows
from floor.clock import now_ms
from floor.transactions import Mode
from resonate_site.protocol.envelope import answer

TARGET = "poll://any@g"


def envelope(kind, data):
    import orjson

    return orjson.dumps({"kind": kind, "head": {"corrId": "c", "version": "2026-04-01"}, "data": data})


@pytest.mark.postgres  # only PostgreSQL connections can be closed by the server
@pytest.mark.django_db(transaction=True)
def test_a_request_after_the_database_dropped_the_connection_succeeds_on_a_new_one(monkeypatch):
    from floor import transactions

    monkeypatch.setattr(transactions, "_troubled_until", 0.0)
    assert answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))["head"]["status"] == 200
    assert not transactions.database_troubled()
    old_pid = connection.connection.info.backend_pid
    with connection._nodb_cursor() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [old_pid])

    reply = answer(envelope("promise.get", {"id": "p"}))

    assert reply["head"]["status"] == 200 and reply["data"]["promise"]["id"] == "p"
    assert connection.connection.info.backend_pid != old_pid
    # For TROUBLE_S the server keeps requests off its event loop's thread (resonate_site.serving.ProtocolThreads)
    assert transactions.database_troubled()
    later = time.monotonic() + transactions.TROUBLE_S
    monkeypatch.setattr(transactions.time, "monotonic", lambda: later)
    assert not transactions.database_troubled()


CONNECTION_STATES = {
    "in good order": lambda kept: None,
    "past its age": lambda kept: setattr(kept, "close_at", time.monotonic() - 1),
    "left out of autocommit": lambda kept: kept.set_autocommit(False),
    "after an error, still answering": lambda kept: setattr(kept, "errors_occurred", True),
    "after an error, gone": lambda kept: (setattr(kept, "errors_occurred", True), kept.connection.close()),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("state", CONNECTION_STATES)
def test_a_request_drops_its_thread_s_connection_as_django_would(state):
    """floor.transactions.close_if_old, which each protocol request runs first, leaves a connection in the state
    Django's close_old_connections() leaves it in: closed, or kept with its error forgotten and its health to be
    checked again."""
    from django.db import close_old_connections, connections

    from floor.transactions import close_if_old

    def after(check):
        outcome = []

        def run():
            kept = connections["default"]
            kept.ensure_connection()
            kept.health_check_done = True
            CONNECTION_STATES[state](kept)
            check()
            outcome.append((kept.connection is None, kept.errors_occurred, kept.health_check_done))
            connections.close_all()

        thread = threading.Thread(target=run)  # a connection of its own, as a protocol thread has
        thread.start()
        thread.join()
        return outcome[0]

    django_s, ours = after(close_old_connections), after(close_if_old)
    assert ours == django_s
    closed = state in ("past its age", "left out of autocommit") or (
        state == "after an error, gone" and connection.vendor == "postgresql"  # SQLite's is always usable
    )
    assert ours[0] == closed


@pytest.mark.django_db(transaction=True)
def test_the_messages_of_one_transaction_are_announced_to_the_deliverer_together(monkeypatch):
    from outbox import dispatch

    notified = []
    monkeypatch.setattr(dispatch, "notify", notified.append)
    body = envelope("promise.create", {"id": "wf", "timeoutAt": 10**13})
    answer(body)
    for address in ("poll://uni@g/1", "poll://uni@g/2", "http://localhost:9/x"):
        answer(envelope("promise.register_listener", {"awaited": "wf", "address": address}))

    answer(envelope("promise.settle", {"id": "wf", "state": "resolved"}))

    assert [len(keys) for keys in notified] == [3]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("outcome", ["commits", "rolls back", "inside another's transaction"])
def test_what_an_operation_asks_after_its_commit_runs_once_it_has_committed_and_never_otherwise(mode, outcome):
    """after_commit's hooks run once the operation's writes are committed: before run_atomically returns when it
    commits them itself (at once after its one statement in autocommit, on PostgreSQL), at the caller's commit
    when it runs inside the caller's transaction, never when that rolls back; each hook once, with its items."""
    from django.db import transaction

    from floor.transactions import after_commit, run_atomically

    heard = []

    def operation():
        rows.query("SELECT 1")
        after_commit(heard.append, "a", "b")
        after_commit(heard.append, "c")
        if outcome == "rolls back":
            raise RuntimeError("rolled back")
        return "done"

    if outcome == "rolls back":
        with pytest.raises(RuntimeError):
            run_atomically(operation, mode=mode)
        assert heard == []
    elif outcome == "commits":
        assert run_atomically(operation, mode=mode) == "done"
        assert heard == [["a", "b", "c"]]
    else:
        with transaction.atomic():
            run_atomically(operation, mode=mode)
            assert heard == []
        assert heard == [["a", "b", "c"]]


@pytest.fixture
def through_proxy(pg_proxy):
    """This test's database connection goes through the fault proxy."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=pg_proxy.port)
    yield pg_proxy
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_request_on_a_kept_connection_the_network_cut_succeeds_on_a_new_one(through_proxy):
    assert answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))["head"]["status"] == 200
    through_proxy("drop")  # psycopg: "server closed the connection unexpectedly", with no SQLSTATE

    reply = answer(envelope("promise.get", {"id": "p"}))

    assert reply["head"]["status"] == 200 and reply["data"]["promise"]["id"] == "p"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_database_that_refuses_connections_gets_a_503_envelope_then_service_resumes(through_proxy, settings):
    settings.RESONATE = {**settings.RESONATE, "DB_OUTAGE_WAIT_MS": 300}
    through_proxy("refuse")

    refused = answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))

    assert refused["head"]["status"] == 503 and refused["data"] == "Database unavailable, please retry"
    through_proxy("accept")
    assert answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))["head"]["status"] == 200


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_request_waits_out_a_database_that_is_back_within_the_outage_wait(through_proxy):
    """A failover's promotion takes a second or two, and the released Python SDK does not retry a 503: a request
    that cannot reach the database waits for it (DB_OUTAGE_WAIT_MS, 5 s) and answers once it is back."""
    answer(envelope("promise.get", {"id": "warm"}))  # a kept connection, which the outage kills
    through_proxy("refuse")
    threading.Timer(1.0, through_proxy, args=("accept",)).start()
    started = time.monotonic()

    reply = answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))

    assert reply["head"]["status"] == 200, reply
    assert 0.9 <= time.monotonic() - started < 5


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_lost_while_committing_is_a_503_not_a_retry(through_proxy, monkeypatch):
    """The commit may or may not have happened: running the operation again could do it twice."""
    from resonate_site.protocol import dispatch

    runs = []
    operation = dispatch.OPERATIONS["promise.create"]

    def create_then_cut(req, now):
        runs.append(req["id"])
        reply = operation.handler(req, now)
        through_proxy("drop")
        return reply

    # In a transaction of its own (a create alone is one statement, which has committed when it returns).
    in_transaction = operation._replace(handler=create_then_cut, mode=Mode.TRANSACTION)
    monkeypatch.setitem(dispatch.OPERATIONS, "promise.create", in_transaction)

    reply = answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))

    assert reply["head"]["status"] == 503 and runs == ["p"]


def task_create(id):
    action = {
        "kind": "promise.create",
        "head": {},
        "data": {"id": id, "timeoutAt": 10**13, "tags": {"resonate:target": TARGET}},
    }
    return envelope("task.create", {"pid": "w", "ttl": 60000, "action": action})


def first_step_request(kind):
    """The body of a task.create of promise p, or of a task.acquire of its pending task (p created here)."""
    if kind == "task.create":
        return task_create("p")
    created = answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13, "tags": {"resonate:target": TARGET}}))
    assert created["head"]["status"] == 200
    return envelope("task.acquire", {"id": "p", "version": 0, "pid": "w", "ttl": 60000})


def cut_after_the_first_run(kind, seen, through_proxy, monkeypatch):
    """The first step of `kind` loses its connection once its first run is over (its write committed, its reply not
    yet back), so that it runs again on a new one; returns the list of seen(reply) of each run."""
    from resonate_site.protocol import dispatch

    runs, operation = [], dispatch.OPERATIONS[kind]

    def write_then_cut(req, now):
        reply = operation.first(req, now)
        runs.append(seen(reply))
        if len(runs) == 1:
            through_proxy("drop")
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")  # the reply that does not come back
        return reply

    write_then_cut.__name__ = operation.first.__name__
    monkeypatch.setitem(dispatch.OPERATIONS, kind, operation._replace(first=write_then_cut))
    return runs


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["task.create", "task.acquire"])
def test_a_first_step_whose_write_committed_before_the_connection_was_lost_is_a_503_not_a_409(
    kind, through_proxy, monkeypatch
):
    """task.create's and task.acquire's first steps write with one statement in autocommit. When the connection
    is lost after that statement committed, the step runs again on a new connection and finds the write made:
    it cannot tell it was its own, and the caller, who may hold the task, must not be told 409."""
    body = first_step_request(kind)
    runs = cut_after_the_first_run(kind, lambda reply: reply is not None, through_proxy, monkeypatch)

    reply = answer(body)

    assert runs == [True, False]  # the write committed; run again, the step found it made
    assert reply["head"]["status"] == 503, reply
    task = answer(envelope("task.get", {"id": "p"}))["data"]["task"]
    assert (task["state"], task["version"]) == ("acquired", 1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_settle_whose_write_committed_before_the_connection_was_lost_answers_the_promise_as_settled(
    through_proxy, monkeypatch
):
    """promise.settle's first step settles with one query string in autocommit (settle_at_once). Run again on a new
    connection after that string committed, it finds the promise settled and answers it, as P-03 answers a settle
    of a settled promise: 200 with the settlement, which was its own; nothing is written twice."""
    assert answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))["head"]["status"] == 200
    seen = lambda reply: reply.data["promise"]["state"]  # noqa: E731
    runs = cut_after_the_first_run("promise.settle", seen, through_proxy, monkeypatch)

    reply = answer(envelope("promise.settle", {"id": "p", "state": "rejected", "value": {"data": "eA=="}}))

    assert runs == ["rejected", "rejected"]
    assert reply["head"]["status"] == 200, reply
    assert reply["data"]["promise"]["state"] == "rejected" and reply["data"]["promise"]["value"]["data"] == "eA=="


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("settled_meanwhile", [True, False])
def test_a_create_whose_insert_committed_before_the_connection_was_lost_never_answers_a_later_state(
    settled_meanwhile, through_proxy, monkeypatch
):
    """promise.create writes with one statement in autocommit. Cut off after it committed, it runs again and finds
    the promise: still pending, that is what its own create answers; settled by someone else meanwhile, answering
    it would make the create act twice (create, then read a later state), so the caller gets a 503 and retries."""
    import psycopg

    from resonate_site.protocol import dispatch

    operation, runs = dispatch.OPERATIONS["promise.create"], []
    database = dict(connection.settings_dict)

    def create_then_cut(req, now):
        reply = operation.handler(req, now)
        runs.append(reply.data["promise"]["state"])
        if len(runs) == 1:
            if settled_meanwhile:  # another request settles it, on a connection of its own
                dsn = f"host=127.0.0.1 port=5432 user={database['USER']} dbname={database['NAME']}"
                with psycopg.connect(dsn, autocommit=True) as other:
                    other.execute(
                        "UPDATE promises_promise SET state = 'rejected', settled_at = created_at WHERE id = 'p'"
                    )
            through_proxy("drop")
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")  # the reply that does not come back
        return reply

    create_then_cut.__name__ = operation.handler.__name__
    monkeypatch.setitem(dispatch.OPERATIONS, "promise.create", operation._replace(handler=create_then_cut))

    reply = answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))

    if settled_meanwhile:
        assert reply["head"]["status"] == 503, reply
        assert runs == ["pending"]  # run again, it found the promise settled and did not answer it
    else:
        assert reply["head"]["status"] == 200, reply
        assert reply["data"]["promise"]["state"] == "pending"
        assert runs == ["pending", "pending"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["task.create", "task.acquire"])
def test_a_first_step_on_a_kept_connection_the_network_cut_succeeds_on_a_new_one(kind, through_proxy):
    """The statement never reached the database: run again, the step's write is its own, and so is the answer."""
    answer(envelope("promise.get", {"id": "warm"}))  # a kept connection
    body = first_step_request(kind)
    through_proxy("drop")

    reply = answer(body)

    assert reply["head"]["status"] == 200, reply
    assert reply["data"]["task"]["state"] == "acquired"


@pytest.mark.django_db(transaction=True)
def test_a_committed_operation_answers_200_when_telling_the_deliverer_fails(monkeypatch):
    from outbox import dispatch

    def broker_down(keys):
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(dispatch, "notify", broker_down)
    body = envelope("promise.create", {"id": "wf", "timeoutAt": 10**13, "tags": {"resonate:target": "poll://any@g"}})

    reply = answer(body)

    assert reply["head"]["status"] == 200
    assert answer(envelope("task.get", {"id": "wf"}))["data"]["task"]["state"] == "pending"


@pytest.fixture
def production_deliverer(settings, monkeypatch):
    """This test process starts a production deliverer on first use, stopped after the test."""
    from outbox import dispatch

    settings.RESONATE = {**settings.RESONATE, "BACKGROUND": "celery"}
    monkeypatch.setattr(dispatch, "_deliverer", (None, None))
    yield
    pid, running = dispatch._deliverer
    if running is not None:
        running.stop()


@pytest.mark.django_db(transaction=True)
def test_a_request_never_waits_for_delivery(production_deliverer, monkeypatch):
    """In production the committing process delivers its messages itself, from a thread of its own."""
    import threading
    import time

    from outbox import dispatch

    stalled, delivered = threading.Event(), []

    def stalled_delivery(messages):
        delivered.extend(messages)
        stalled.wait(30)  # the hub or the database as slow as can be

    monkeypatch.setattr(dispatch, "send_claimed", stalled_delivery)
    body = envelope("promise.create", {"id": "wf", "timeoutAt": 10**13, "tags": {"resonate:target": "poll://any@g"}})

    started = time.monotonic()
    reply = answer(body)
    answered_in = time.monotonic() - started
    deadline = time.monotonic() + 5
    while not delivered and time.monotonic() < deadline:
        time.sleep(0.01)
    stalled.set()

    assert reply["head"]["status"] == 200 and answered_in < 5
    assert [m.key for m in delivered] == ["e:wf"]  # poll messages straight to the hub, from its thread


@pytest.mark.django_db(transaction=True)
def test_a_message_is_claimed_as_it_is_written_by_the_process_that_sends_it(production_deliverer, monkeypatch):
    """No claim statement after the commit: the row is written with the attempt counted and the lease taken, and
    the message goes to the sender as it is; were the process to die, the lease lapses and Beat's pass sends it."""
    import time

    from outbox import dispatch
    from outbox.delivery import POLL_LEASE_MS
    from outbox.models import Message

    sent, claimed_by_statement = [], []
    monkeypatch.setattr(dispatch, "send_claimed", sent.extend)
    monkeypatch.setattr(dispatch, "deliver", lambda keys, **kwargs: claimed_by_statement.append(keys) or [])
    target = {"resonate:target": "poll://any@g"}

    written = now_ms()
    answer(envelope("promise.create", {"id": "wf", "timeoutAt": 10**13, "tags": target}), now=1000)

    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.01)
    stored = Message.objects.get(key="e:wf")
    assert [(m.key, m.attempts, m.created_at) for m in sent] == [("e:wf", 1, 1000)]
    assert stored.attempts == 1 and written + POLL_LEASE_MS <= stored.next_attempt_at <= now_ms() + POLL_LEASE_MS
    assert claimed_by_statement == []


@pytest.mark.django_db(transaction=True)
def test_a_message_whose_claim_on_write_ran_down_before_its_commit_is_claimed_again(production_deliverer, monkeypatch):
    """A transaction slow to commit (the database stalled) eats into the lease: past half of it, another deliverer
    may take the message any moment, so it is claimed again by statement rather than sent on a lapsing lease."""
    import time

    from outbox import delivery, dispatch

    sent, claimed_by_statement = [], []
    monkeypatch.setattr(dispatch, "send_claimed", sent.extend)
    monkeypatch.setattr(dispatch, "deliver", lambda keys, **kwargs: claimed_by_statement.append(keys) or [])
    monkeypatch.setattr(delivery, "now_ms", lambda: now_ms() - delivery.POLL_LEASE_MS)  # claimed 5 s "ago"

    answer(envelope("promise.create", {"id": "wf", "timeoutAt": 10**13, "tags": {"resonate:target": "poll://any@g"}}))

    deadline = time.monotonic() + 5
    while not claimed_by_statement and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent == [] and claimed_by_statement == [["e:wf"]]


@pytest.mark.django_db(transaction=True)
def test_a_production_deliverer_hands_pushes_to_celery_and_a_broker_outage_costs_the_request_nothing(
    production_deliverer, monkeypatch
):
    import time

    from outbox.tasks import deliver

    handed = []

    def broker_down(keys):
        handed.append(keys)
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(deliver, "delay", broker_down)
    target = {"resonate:target": "http://127.0.0.1:9/hook"}

    reply = answer(envelope("promise.create", {"id": "wf", "timeoutAt": 10**13, "tags": target}))

    deadline = time.monotonic() + 5
    while not handed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reply["head"]["status"] == 200
    assert handed == [["e:wf"]]  # left in the outbox for Beat's pass when the broker is away


@pytest.mark.django_db(transaction=True)
def test_a_write_that_fails_after_the_last_read_rolls_back_the_whole_operation(monkeypatch):
    """A settlement is written with one statement on PostgreSQL; a failure after it must still undo it."""
    from promises.models import Listener
    from resonate_site.protocol import dispatch

    operation = dispatch.OPERATIONS["promise.settle"]

    def settle_then_fail(req, now):
        reply = operation.handler(req, now)
        Listener.register("p", "poll://any@g")
        rows.insert(Listener(promise_id="p", address="poll://any@g"))  # a duplicate: refused by the database
        return reply

    # The path in a transaction, which a settle with registrations takes: its one-statement first step left out.
    patched = operation._replace(handler=settle_then_fail, first=None)
    monkeypatch.setitem(dispatch.OPERATIONS, "promise.settle", patched)
    answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))

    reply = answer(envelope("promise.settle", {"id": "p", "state": "resolved"}))

    assert reply["head"]["status"] == 503  # retried as a lost race, then refused: nothing committed
    assert answer(envelope("promise.get", {"id": "p"}))["data"]["promise"]["state"] == "pending"


@pytest.mark.django_db(transaction=True)
def test_a_deliverer_whose_kept_connection_died_sends_its_batch_on_a_new_one(production_deliverer, monkeypatch):
    """The batch's first statement finds the connection dead: asked again on a new one, the batch goes out now
    rather than after its lease (the fault suite's dropped connections made timers 5.9 s late before)."""
    import time

    from django.db import OperationalError

    from outbox import dispatch
    from outbox.models import Pause

    sent, calls = [], []
    monkeypatch.setattr(dispatch, "send_claimed", sent.extend)

    def dead_then_fine():
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("consuming input failed: server closed the connection unexpectedly")
        return False

    monkeypatch.setattr(Pause, "is_paused", dead_then_fine)

    answer(envelope("promise.create", {"id": "wf", "timeoutAt": 10**13, "tags": {"resonate:target": "poll://any@g"}}))

    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [m.key for m in sent] == ["e:wf"] and len(calls) == 2


@pytest.mark.django_db
def test_hot_statements_are_seen_by_whoever_watches_the_queries():
    """rows keeps a cursor of its own on PostgreSQL, but steps aside for CaptureQueriesContext, DEBUG's log
    and execute_wrapper: they see every statement, as with Django's cursor."""
    from django.test.utils import CaptureQueriesContext

    from promises.models import Promise

    with CaptureQueriesContext(connection) as captured:
        rows.fetch(Promise, "nobody")
    seen = []
    with connection.execute_wrapper(lambda execute, sql, *args: seen.append(sql) or execute(sql, *args)):
        rows.fetch(Promise, "nobody")
    assert ["promises_promise" in query["sql"] for query in captured] == [True]
    assert ["promises_promise" in sql for sql in seen] == [True]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_hot_statements_follow_the_connection_when_django_replaces_it():
    from promises.models import Promise

    assert rows.fetch(Promise, "nobody") is None
    connection.close()  # its age, or a failure: Django opens a new one on the next statement
    assert rows.fetch(Promise, "nobody") is None
    assert rows.query("SELECT pg_backend_pid()")[0][0] == connection.connection.info.backend_pid


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_transaction_s_begin_goes_with_its_first_statement_and_its_commit_with_its_last_write(tmp_path):
    """psycopg sends BEGIN and COMMIT as round trips of their own; rows puts BEGIN in front of the transaction's
    first statement, and sends the writes held for the commit (rows.at_commit) with COMMIT: a listener's
    registration is two round trips. Read off libpq's trace of what the connection sent, so that a psycopg upgrade
    that changes this is caught."""
    from promises.models import Listener

    created = answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))
    assert created["head"]["status"] == 200
    raw, trace = connection.connection, tmp_path / "libpq.trace"
    with open(trace, "w") as sink:
        raw.pgconn.trace(sink.fileno())
        try:
            reply = answer(envelope("promise.register_listener", {"awaited": "p", "address": "poll://uni@g/w"}))
        finally:
            raw.pgconn.untrace()
    sent = [line.split("\t", 4)[-1] for line in trace.read_text().splitlines() if "\tF\t" in line]

    assert reply["head"]["status"] == 200 and Listener.objects.filter(promise_id="p").exists()
    assert len(sent) == 2, sent
    assert sent[0].startswith(' "BEGIN; SELECT') and sent[1].endswith('; COMMIT"'), sent
    held = sent[1].startswith(' "INSERT INTO "promises_listener"') or sent[1].startswith(' "SELECT r_')
    assert held, sent  # the write as it is, or (sent before by this process) as its function (floor.functions)
    assert sent[1].endswith('; COMMIT"'), sent
    assert connection.get_autocommit() and raw.autocommit  # as atomic() leaves a connection


@pytest.fixture(params=["counted", "prepared at once"])
def threshold(request, monkeypatch):
    """The connections' DATABASE_PREPARE_THRESHOLD: 5, as by default (what a test sends runs mostly by psycopg's
    cursors), or 0: every statement prepared by name at its first run, and sent by floor.rows' own path."""
    if request.param == "prepared at once":
        monkeypatch.setitem(connection.settings_dict["OPTIONS"], "prepare_threshold", 0)
    connection.close()  # the next statement connects with it
    yield request.param
    connection.close()


def sent_by_libpq(raw, trace, send):
    """What send() made the psycopg connection `raw` send, by libpq's trace: one line per message to the server."""
    with open(trace, "w") as sink:
        raw.pgconn.trace(sink.fileno())
        try:
            reply = send()
        finally:
            raw.pgconn.untrace()
    return reply, [line.split("\t", 3)[-1] for line in trace.read_text().splitlines() if "\tF\t" in line]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_with_its_statements_prepared_a_transaction_s_begin_and_commit_go_with_them_bound_apart(
    tmp_path, monkeypatch, sent_before
):
    """Once prepared by name, the statement that opens a transaction goes with its BEGIN, and the held writes with
    the COMMIT, each pair in one round trip as libpq's pipeline mode sends them (floor.rows._pipelined): no query
    string bound client-side, nothing planned again."""
    from promises.models import Listener

    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "prepare_threshold", 0)
    connection.close()
    for id in ("warm", "p"):
        assert answer(envelope("promise.create", {"id": id, "timeoutAt": 10**13}))["head"]["status"] == 200
    listen = {"awaited": "warm", "address": "poll://uni@g/w"}
    assert answer(envelope("promise.register_listener", listen))["head"]["status"] == 200  # prepares what it sends

    listen = {"awaited": "p", "address": "poll://uni@g/w"}
    reply, sent = sent_by_libpq(
        connection.connection, tmp_path / "libpq.trace", lambda: answer(envelope("promise.register_listener", listen))
    )

    assert reply["head"]["status"] == 200 and Listener.objects.filter(promise_id="p").exists()
    kinds = [message.split("\t", 1)[0] for message in sent]
    assert "Query" not in kinds and kinds.count("Sync") == 2, sent  # two round trips, both bound apart
    first, second = "\n".join(sent[: kinds.index("Sync") + 1]), "\n".join(sent[kinds.index("Sync") + 1 :])
    assert '"BEGIN"' in first and '"_resonate_' in first and "COMMIT" not in first, sent
    assert '"COMMIT"' in second and '"_resonate_' in second and "BEGIN" not in second, sent
    assert connection.get_autocommit() and connection.connection.autocommit  # as atomic() leaves a connection
    connection.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_statement_after_a_held_write_sends_the_write_first_and_sees_it():
    from floor.transactions import run_atomically
    from promises.models import Promise

    answer(envelope("promise.create", {"id": "held", "timeoutAt": 10**13}))

    def write_then_read():
        rows.at_commit([rows.setting(Promise(timeout_at=5), "timeout_at", pks=["held"])])
        return rows.fetch(Promise, "held").timeout_at

    assert run_atomically(write_then_read) == 5
    assert rows.fetch(Promise, "held").timeout_at == 5


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_held_write_that_fails_at_the_commit_rolls_the_whole_transaction_back(threshold, sent_before):
    """Its error comes back with the COMMIT's round trip, the COMMIT skipped (in a pipeline, once prepared)."""
    from floor.transactions import Busy, run_atomically
    from promises.models import Promise

    answer(envelope("promise.create", {"id": "first", "timeoutAt": 10**13}))
    answer(envelope("promise.create", {"id": "taken", "timeoutAt": 10**13}))

    def write_then_hold_a_conflict():
        rows.update(Promise(id="first", timeout_at=7), "timeout_at")  # sent now
        rows.at_commit([rows.setting(Promise(id="taken"), "id", pks=["first"])])  # the key exists: fails at commit

    with pytest.raises(Busy):  # an IntegrityError is a lost race, retried, and then given up
        run_atomically(write_then_hold_a_conflict)
    assert rows.fetch(Promise, "first").timeout_at == 10**13


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_lost_while_sending_the_held_writes_with_the_commit_is_a_503_not_a_retry(
    through_proxy, monkeypatch, threshold, sent_before
):
    created = answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13, "tags": {"resonate:target": TARGET}}))
    assert created["head"]["status"] == 200
    sends, held = [], rows.commit_held

    def cut_then_commit(*args, **kwargs):
        sends.append(1)
        through_proxy("drop")
        return held(*args, **kwargs)

    monkeypatch.setattr(rows, "commit_held", cut_then_commit)
    reply = answer(envelope("promise.register_listener", {"awaited": "p", "address": "poll://uni@g/w"}))

    assert reply["head"]["status"] == 503 and sends == [1]


@pytest.mark.postgres
@pytest.mark.django_db
def test_no_column_that_compares_byte_wise_keeps_a_like_index_beside_its_own():
    """Django adds a text_pattern_ops index beside every unique or indexed text column; on an IdField (COLLATE "C")
    its own index serves LIKE 'prefix%' already, so the twin only costs writes (floor/schema.py drops them)."""
    from django.apps import apps

    from floor.schema import pattern_twins

    tables = {model._meta.db_table for model in apps.get_models()}
    assert {table: pattern_twins(connection, table) for table in tables if pattern_twins(connection, table)} == {}


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_prefix_search_on_promise_ids_uses_their_primary_key_index():
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN SELECT id FROM promises_promise WHERE id LIKE 'order-%%'")
        plan = " ".join(row[0] for row in cursor.fetchall())
    assert "promises_promise_pkey" in plan


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_hot_statement_run_often_is_prepared_and_planned_once():
    """floor.rows.cursor_of binds single statements server-side; the connection prepares one it has run
    DATABASE_PREPARE_THRESHOLD times (5 by default), so PostgreSQL plans it once."""
    assert connection.settings_dict["OPTIONS"]["prepare_threshold"] == 5
    answer(envelope("promise.create", {"id": "prepared", "timeoutAt": 2**62}))
    for _ in range(6):
        assert answer(envelope("promise.get", {"id": "prepared"}))["head"]["status"] == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [statement for (statement,) in cursor.fetchall()]
    assert any('FROM "promises_promise" WHERE "id" = $1' in statement for statement in prepared), prepared


def prepared_by_name(sql):
    """The statements this session has prepared by floor.rows' own names whose text is `sql` (with $n)."""
    text, _ = functions.numbered(sql, 0)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM pg_prepared_statements WHERE name LIKE '\\_resonate\\_%%' AND statement = %s", [text]
        )
        return [name for (name,) in cursor.fetchall()]


TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)  # as text takes
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
PARAMETERS = st.tuples(  # -2**63 bound client-side reads as -(2**63), out of range: the cursor to compare with fails
    st.none() | st.integers(-(2**63) + 1, 2**63 - 1), st.none() | TEXT, st.none() | st.booleans(), st.none() | JSON
)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@given(st.lists(PARAMETERS, min_size=1, max_size=12))
def test_a_statement_prepared_by_name_answers_what_psycopg_s_cursor_answers(history):
    """A statement run DATABASE_PREPARE_THRESHOLD times is prepared by name and sent by libpq's own call, its
    parameters dumped and its rows loaded outside psycopg's cursor (floor.rows._Single). Whatever the values,
    NULLs among them (another statement to PostgreSQL: its parameters' types differ), it answers as the cursor."""
    from psycopg.types.json import Jsonb

    sql = "SELECT %s::bigint, %s::text, %s::boolean, %s::jsonb, '100%%', %s::bigint + 1 WHERE %s::boolean IS NOT FALSE"
    for number, text, flag, value in history:
        params = [number, text, flag, None if value is None else Jsonb(value), 7, flag]
        with connection.cursor() as cursor:  # Django's, bound client-side
            cursor.execute(sql, params)
            expected = cursor.fetchall()
        assert rows.query(sql, params) == expected
    threshold = connection.connection.prepare_threshold
    if sum(1 for number, text, flag, value in history if None not in (number, text, flag, value)) > threshold:
        assert prepared_by_name(sql)  # all of them non-NULL: one statement to PostgreSQL, run past the threshold


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_hot_paths_bind_every_int_as_a_bigint_before_and_after_the_statement_is_prepared():
    """The rows' integers go unwrapped (rows.prepare): psycopg alone would bind 1 as a smallint, and 32767 + 1 would
    overflow. Both the cursor that runs a statement until it is prepared and the prepared path bind a bigint."""
    sql = "SELECT pg_typeof(%s)::text, %s + 1, pg_typeof(%s)::text"
    connection.ensure_connection()
    runs = connection.connection.prepare_threshold + 2
    for n in range(runs):
        assert rows.query(sql, [1, 32767, 2**40 + n]) == [("bigint", 32768, "bigint")], n
    assert prepared_by_name(sql)  # the last runs took the prepared path


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_error_of_a_statement_prepared_by_name_is_django_s_and_its_transaction_rolls_back():
    from django.db import DataError, IntegrityError, transaction

    from promises.models import Promise

    divide = "SELECT 10 / %s::integer"
    connection.ensure_connection()
    for _ in range(connection.connection.prepare_threshold + 1):
        assert rows.query(divide, [5]) == [(2,)]
    assert prepared_by_name(divide)
    with pytest.raises(DataError, match="division by zero"):
        rows.query(divide, [0])
    assert rows.query(divide, [2]) == [(5,)]  # outside a transaction, the next runs as before

    insert = 'INSERT INTO "promises_promise" ("id", "state", "param", "value", "tags", "timeout_at", "created_at",'
    insert += " \"timeout_armed\", \"timer\") VALUES (%s, 'pending', '{}', '{}', '{}', 1, 1, false, false)"
    for n in range(connection.connection.prepare_threshold + 1):
        rows.query(f"{insert} RETURNING 1", [f"p{n}"])
    assert prepared_by_name(f"{insert} RETURNING 1")
    with pytest.raises(IntegrityError), transaction.atomic():
        rows.query(f"{insert} RETURNING 1", ["fresh"])  # opens the transaction (its BEGIN in front)
        rows.query(f"{insert} RETURNING 1", ["p0"])  # by name, within it: the key exists
    assert rows.fetch(Promise, "fresh") is None  # rolled back with its transaction
    assert rows.query(divide, [1]) == [(10,)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_nothing_is_prepared_by_name_with_the_prepare_threshold_off_nor_beyond_what_a_connection_keeps(monkeypatch):
    """Off (a pooler in transaction mode, where a name prepared on one server connection is unknown on the next),
    statements go by psycopg's cursor, unprepared; and one connection counts or prepares PREPARED_KEPT at most."""
    connection.ensure_connection()
    connection.connection.prepare_threshold = None
    for _ in range(8):
        assert rows.query("SELECT %s::integer + 1", [1]) == [(2,)]
    assert not prepared_by_name("SELECT %s::integer + 1")

    connection.close()  # a new connection: nothing kept
    connection.ensure_connection()
    monkeypatch.setattr(rows, "PREPARED_KEPT", 1)
    for _ in range(8):
        assert rows.query("SELECT %s::integer + 2", [1]) == [(3,)]
        assert rows.query("SELECT %s::integer + 3", [1]) == [(4,)]
    assert prepared_by_name("SELECT %s::integer + 2")
    assert not prepared_by_name("SELECT %s::integer + 3")


def made_functions():
    """The functions floor.functions has made in this database, by name."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT proname FROM pg_proc WHERE proname ~ '^r_[0-9a-f]{20}$'")
        return {name for (name,) in cursor.fetchall()}


@pytest.fixture
def sent_before(monkeypatch):
    """Statements sent together become a function the first time (floor.functions.SENT_BEFORE at 0), in a process
    that has made none yet."""
    monkeypatch.setattr(functions, "SENT_BEFORE", 0)
    monkeypatch.setattr(functions, "_shapes", {})
    monkeypatch.setattr(functions, "_by_name", {})


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_statements_sent_together_often_go_as_one_function_bound_server_side(tmp_path, monkeypatch):
    """A settle with nothing registered sends its lock and its writes together (rows.send_all). The first time they go
    as one query string; from the second, as one call of a function made of them, its parameters bound apart
    (server-side): PostgreSQL plans its statements once per session. Every settle settles."""
    from promises.models import Promise

    monkeypatch.setattr(functions, "_shapes", {})
    connection.ensure_connection()
    raw, trace = connection.connection, tmp_path / "libpq.trace"
    ids = [f"often-{n}" for n in range(4)]
    for id in ids:
        assert answer(envelope("promise.create", {"id": id, "timeoutAt": 10**13}))["head"]["status"] == 200
    sent = []
    for id in ids:
        with open(trace, "w") as sink:
            raw.pgconn.trace(sink.fileno())
            try:
                reply = answer(envelope("promise.settle", {"id": id, "state": "resolved", "value": {}}))
            finally:
                raw.pgconn.untrace()
        assert reply["head"]["status"] == 200 and reply["data"]["promise"]["state"] == "resolved", reply
        sent.append([line.split("\t")[3:] for line in trace.read_text().splitlines() if "\tF\t" in line])

    assert [kind for kind, *_ in sent[0]] == ["Query"] and sent[0][0][1].startswith(' "SELECT held.*'), sent[0]
    for trip in sent[1:]:
        kinds = [kind for kind, *_ in trip]
        assert "Query" not in kinds and kinds[-1] == "Sync" and "Execute" in kinds, trip  # one round trip, bound
    called = set(re.findall(r"FROM (r_[0-9a-f]{20})\(", str(sent[1])))
    assert len(called) == 1 and called <= made_functions(), sent[1]
    assert {rows.fetch(Promise, id).state for id in ids} == {"resolved"}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_function_returns_each_statement_s_rows_as_the_query_string_does(sent_before):
    """Rows of every column type the hot tables hold (text, bigint, smallint, boolean, jsonb, NULL), statements without
    rows (None), with none found ([]), the same statement twice: the function's results are the string's."""
    from psycopg.types.json import Jsonb

    from promises.models import Promise

    answer(
        envelope("promise.create", {"id": "typed", "timeoutAt": 10**13, "param": {"data": "eA=="}, "tags": {"a": "b"}})
    )
    read = f"SELECT {rows.columns(Promise)} FROM promises_promise WHERE id = %s"
    parts = [
        (read, ["typed"]),
        ("UPDATE promises_promise SET branch = branch WHERE id = %s AND %s", ["typed", True]),
        (read, ["nobody"]),
        ("SELECT %s::int + 1, %s::text, NULL::bigint, %s::jsonb", [1, "x", Jsonb({"k": [1, 2]})]),
        ("SELECT %s::int + 1, %s::text, NULL::bigint, %s::jsonb", [2, "y", Jsonb(None)]),
    ]
    with connection.cursor() as cursor:
        cursor.execute("; ".join(sql for sql, _ in parts), [v for _, p in parts for v in p])
        as_string = rows._results(cursor, len(parts))
    as_function = rows.send_all(connection, parts)
    assert len(made_functions()) >= 1
    assert as_function == as_string and as_function[1] is None and as_function[2] == [], as_function
    assert rows.send_all(connection, parts) == as_string  # and again, the function made


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_function_dropped_behind_the_server_s_back_is_made_again_and_the_request_answers(sent_before):
    """Someone dropped the functions (by hand, a restore of another database): the next call finds none of its name.
    The operation is retried (floor.transactions), and the function made again."""
    for id in ("one", "two"):
        assert answer(envelope("promise.create", {"id": id, "timeoutAt": 10**13}))["head"]["status"] == 200
    assert answer(envelope("promise.settle", {"id": "one", "state": "resolved", "value": {}}))["head"]["status"] == 200
    made = made_functions()
    assert made
    with connection.cursor() as cursor:
        for name in made:
            cursor.execute(f"DROP FUNCTION {name}")

    settled = answer(envelope("promise.settle", {"id": "two", "state": "resolved", "value": {}}))

    assert settled["head"]["status"] == 200 and settled["data"]["promise"]["state"] == "resolved", settled
    assert made_functions() & made


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_statements_a_function_cannot_carry_go_as_a_query_string(sent_before, caplog):
    """More parameters than a function takes (FUNCTION_MAX_ARGS), or a statement PostgreSQL cannot describe alone (a
    parameter of no type it can tell): sent as one query string, every time, and said once in the log."""
    before = made_functions()
    values = list(range(functions.FUNCTION_MAX_ARGS + 1))
    wide = (f"SELECT count(*) FROM (VALUES {rows.placeholders(values).replace('%s', '(%s::int)')}) v", values)
    for _ in range(2):
        assert rows.send_all(connection, [wide, ("SELECT %s::text", ["w"])]) == [[(len(values),)], [("w",)]]
    with caplog.at_level("WARNING", logger="floor.functions"):
        for _ in range(2):
            found = rows.send_all(connection, [("SELECT %s IS NULL", [None]), ("SELECT %s::int", [7])])
            assert found == [[(True,)], [(7,)]]
    assert made_functions() == before
    assert sum("stay a query string" in message for message in caplog.messages) == 1, caplog.messages


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_processes_making_one_function_at_once_both_call_it():
    """Two processes that meet the same statements at once both create their function: the second's CREATE finds it
    made (DuplicateFunction, or a unique violation on the catalog while the first commits), which is as good."""
    parts = [("SELECT %s::int * 2", [3]), ("SELECT %s::text || 'b'", ["a"])]
    results, errors = [], []

    def make():
        from django.db import connections

        try:
            function = functions._create(connections["default"], parts)
            results.append(function)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connections.close_all()

    functions._by_name.clear()
    threads = [threading.Thread(target=make) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and all(isinstance(r, functions.Function) for r in results) and len(results) == 4, results
    (name,) = {function.name for function in results}
    assert name in made_functions()
    definition, *_ = functions._definition(
        [sql for sql, _ in parts], [([20], [(23, -1)]), ([25], [(25, -1)])], connection.connection
    )
    functions._create_function(connection.connection, definition)  # made already: no error


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("sent", [0, 1, 2, 5])
def test_settling_promises_with_several_registrations_answers_however_often_sent_before(sent, monkeypatch):
    """Each settle here sends the same statements several times together (one per callback and listener), in strings
    of varying shapes, and at some settle they become a function."""
    monkeypatch.setattr(functions, "SENT_BEFORE", sent)
    monkeypatch.setattr(functions, "_shapes", {})
    for n in range(8):
        id = f"settled-{sent}-{n}"
        assert answer(envelope("promise.create", {"id": id, "timeoutAt": 10**13}))["head"]["status"] == 200
        for awaiter in range(2 + n % 2):  # the shapes vary
            awaiter_id = f"{id}.a{awaiter}"
            created = answer(
                envelope("promise.create", {"id": awaiter_id, "timeoutAt": 10**13, "tags": {"resonate:target": TARGET}})
            )
            assert created["head"]["status"] == 200, created
            registered = answer(envelope("promise.register_callback", {"awaited": id, "awaiter": awaiter_id}))
            assert registered["head"]["status"] == 200, registered
            address = f"poll://uni@g/l{awaiter}"
            listened = answer(envelope("promise.register_listener", {"awaited": id, "address": address}))
            assert listened["head"]["status"] == 200, listened
        settled = answer(envelope("promise.settle", {"id": id, "state": "resolved", "value": {}}))
        assert settled["head"]["status"] == 200 and settled["data"]["promise"]["state"] == "resolved", settled


@pytest.mark.parametrize(
    ("value", "threshold"), [("5", 5), ("0", 0), (" 12 ", 12), ("off", None), ("OFF", None), ("", None)]
)
def test_the_prepare_threshold_is_a_count_or_off(value, threshold):
    from resonate_site.settings import prepare_threshold

    assert prepare_threshold(value) == threshold


@pytest.mark.parametrize("value", ["-1", "five", "1.5", "yes"])
def test_a_prepare_threshold_that_is_neither_a_count_nor_off_is_refused_clearly(value):
    from django.core.exceptions import ImproperlyConfigured

    from resonate_site.settings import prepare_threshold

    with pytest.raises(ImproperlyConfigured, match="DATABASE_PREPARE_THRESHOLD"):
        prepare_threshold(value)


@pytest.mark.parametrize(
    ("url", "host", "port", "options"),
    [
        ("postgres://u:pw@h:6432/db", "h", 6432, {}),
        (
            "postgres://u@h1:5433,h2:5434/db?target_session_attrs=read-write",
            "h1,h2",
            "5433,5434",
            {"target_session_attrs": "read-write"},
        ),
        ("postgresql://u:pw@h1,h2/db", "h1,h2", "", {}),
        ("postgres://u@h1:5433,h2/db", "h1,h2", "5433,", {}),
        ("postgres://u@[::1]:5433,[fe80::2]:5434/db", "::1,fe80::2", "5433,5434", {}),
        (
            "postgres://u@/db?host=h1,h2&port=1,2&target_session_attrs=read-write",
            "",
            "",
            {"host": "h1,h2", "port": "1,2"},
        ),
    ],
)
def test_database_url_takes_libpq_s_multi_host_form(url, host, port, options):
    from resonate_site.settings import parse_database_url

    db = parse_database_url(url)
    assert (db["HOST"], db["PORT"], db["NAME"]) == (host, port, "db")
    assert db.get("OPTIONS", {}).items() >= options.items()


@pytest.mark.parametrize(
    "url",
    ["postgres://u:secret@h:abc,x/db", "postgres://u:secret@h:port/db", "postgres://u:secret@,h/db", "nosuch://x"],
)
def test_a_database_url_that_cannot_be_read_is_refused_clearly_without_its_password(url):
    from django.core.exceptions import ImproperlyConfigured

    from resonate_site.settings import parse_database_url

    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL .* cannot be read") as refused:
        parse_database_url(url)
    assert "secret" not in str(refused.value)


@given(st.text(max_size=60).map(lambda tail: "postgres://" + tail))
def test_any_database_url_is_read_or_refused_clearly(url):
    from django.core.exceptions import ImproperlyConfigured

    from resonate_site.settings import parse_database_url

    try:
        parse_database_url(url)
    except ImproperlyConfigured as refused:
        assert "cannot be read" in str(refused)


@pytest.mark.postgres
def test_a_multi_host_url_connects_to_the_host_that_answers(tmp_path):
    """libpq tries the hosts in turn: the first here refuses (nothing listens on its port)."""
    import subprocess
    import sys

    from tests.e2e.servers import ROOT, free_port

    settings_dict = connection.settings_dict
    url = (
        f"postgres://{settings_dict['USER']}@127.0.0.1:{free_port()},{settings_dict['HOST']}:{settings_dict['PORT']}"
        "/postgres?target_session_attrs=read-write"
    )
    shown = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from django.db import connection as c; c.ensure_connection(); print(c.connection.info.port)",
        ],
        cwd=ROOT,
        env={**__import__("os").environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split()[-1] == str(settings_dict["PORT"])


def said(trip):
    """What a round trip sent (as round_trips shows it), with the statements of any function it calls (floor.functions)
    in place of the call."""
    for call, name in re.findall(r"(SELECT (?:\* FROM )?(r_[0-9a-f]{20}))", trip):
        with connection.cursor() as cursor:
            cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = %s", [name])
            ((body,),) = cursor.fetchall()
        statements = body.split("BEGIN\n", 1)[1].splitlines()
        looped = r"^(?:r_part := \d+; )?FOR [^ ]+(?:, [^ ]+)* IN (.*) LOOP RETURN NEXT; END LOOP;$"
        returned = r"^RETURN QUERY SELECT \d+, .*? FROM \((.*)\) AS r_s\([^)]*\);$"
        statements = [re.sub(returned, r"\1", re.sub(looped, r"\1", line)) for line in statements]
        trip = trip.replace(call, " ".join(statements[:-1]))  # but END
    return trip


def first(trip):
    """The first statement a round trip sent: of the query string, or of the function it calls."""
    return said(trip).removeprefix("Parse").strip(' "')


def traced(body, tmp_path):
    """The round trips a request made, answered in this process: each a simple query, or an extended one up to its
    Sync (libpq's trace of what the connection sent)."""
    raw, trace = connection.connection, tmp_path / "libpq.trace"
    with open(trace, "w") as sink:
        raw.pgconn.trace(sink.fileno())
        try:
            reply = answer(body)
        finally:
            raw.pgconn.untrace()
    assert reply["head"]["status"] == 200, reply
    sent = [line.split("\t")[3:] for line in trace.read_text().splitlines() if "\tF\t" in line]
    trips, current = [], []
    for kind, *rest in sent:
        current.append(rest[0] if kind == "Query" else kind + (f" {rest[-1]}" if kind == "Parse" else ""))
        if kind in ("Query", "Sync"):
            trips.append(" ".join(current))
            current = []
    return trips


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("sent_before", [10**9, 0], ids=["as-strings", "as-functions"])
def test_the_round_trips_of_settlements_registrations_task_create_and_acquire(tmp_path, monkeypatch, sent_before):
    """promise.settle and task.fulfill lock the promise, ask what is registered on it (and task.fulfill whether the
    caller holds the task) and, with nothing registered, write the settlement, in one query string in autocommit; a
    fenced settle sends its writes with COMMIT (two round trips in all). With a listener the settlement takes it and
    writes its unblock in a transaction: a round trip for the settlement, then the unblock with the COMMIT. A
    task.fulfill whose promise has an awaiter (and no listener) then locks the awaiter and reads its task with its
    own lock, and sends the settlement and the resume with the COMMIT. A
    registration's insert goes with COMMIT, task.create of a new promise is one statement, and task.acquire one
    query string. A round trip
    is a simple query, or an extended one up to its Sync (libpq's trace of what the connection sent). The same
    round trips whether statements sent together go as they are or as their function (floor.functions)."""
    from promises.models import Promise
    from tasks import handlers

    monkeypatch.setattr(functions, "SENT_BEFORE", sent_before)
    monkeypatch.setattr(functions, "_shapes", {})
    monkeypatch.setattr(handlers, "FULFILLS", handlers.Hunch())  # its first step tried (tested apart)

    def round_trips(body):
        return traced(body, tmp_path)

    for id in ("alone", "listened"):
        assert answer(envelope("promise.create", {"id": id, "timeoutAt": 10**13}))["head"]["status"] == 200
    listen = {"awaited": "listened", "address": "poll://uni@g/w"}
    registered = round_trips(envelope("promise.register_listener", listen))
    assert len(registered) == 2, registered  # the lock, then the listener's insert with COMMIT
    assert first(registered[1]).startswith('INSERT INTO "promises_listener"') and registered[1].endswith('; COMMIT"')
    action = {"kind": "promise.create", "head": {}, "data": {"id": "new", "timeoutAt": 10**13}}
    created = round_trips(envelope("task.create", {"pid": "w", "ttl": 60_000, "action": action}))
    assert len(created) == 1 and "Execute" in created[0], created  # one statement, bound apart, in autocommit

    # Nothing registered: the lock, the registrations and the settlement's writes, provided it is live with none,
    # in one query string in autocommit.
    alone = round_trips(envelope("promise.settle", {"id": "alone", "state": "resolved", "value": {}}))
    assert len(alone) == 1, alone
    assert first(alone[0]).startswith("SELECT") and "FOR UPDATE" in said(alone[0]) and "BEGIN;" not in alone[0], alone
    assert '"promises_listener"' in said(alone[0]) and 'UPDATE "promises_promise"' in said(alone[0]), alone

    # A listener: that query string writes nothing, then the settlement takes it in a transaction.
    listened = round_trips(envelope("promise.settle", {"id": "listened", "state": "resolved", "value": {}}))
    assert len(listened) == 4, listened
    assert listened[1].startswith(' "BEGIN; SELECT') and "EXISTS" in said(listened[1]), listened
    assert first(listened[3]).startswith('INSERT INTO "outbox_message"') and listened[3].endswith('; COMMIT"'), listened

    action = {"kind": "promise.create", "head": {}, "data": {"id": "held", "timeoutAt": 10**13}}
    created = answer(envelope("task.create", {"pid": "w", "ttl": 60_000, "action": action}))
    settle = {"kind": "promise.settle", "head": {}, "data": {"id": "held", "state": "resolved", "value": {}}}
    fulfil = {"id": "held", "version": created["data"]["task"]["version"], "action": settle}
    fulfilled = round_trips(envelope("task.fulfill", fulfil))
    assert len(fulfilled) == 1, fulfilled  # task.fulfill asks the same question, and whether the task is held
    assert "FOR UPDATE" in said(fulfilled[0]) and '"tasks_task"' in said(fulfilled[0]), fulfilled
    assert 'UPDATE "promises_promise"' in said(fulfilled[0]) and "BEGIN;" not in fulfilled[0], fulfilled

    action = {"kind": "promise.create", "head": {}, "data": {"id": "fencing", "timeoutAt": 10**13}}
    created = answer(envelope("task.create", {"pid": "w", "ttl": 60_000, "action": action}))
    answer(envelope("promise.create", {"id": "fenced", "timeoutAt": 10**13}))
    settle = {"kind": "promise.settle", "head": {}, "data": {"id": "fenced", "state": "resolved", "value": {}}}
    fence = {"id": "fencing", "version": created["data"]["task"]["version"], "action": settle}
    fenced = round_trips(envelope("task.fence", fence))
    assert len(fenced) == 2, fenced  # the fence's locks, its task and the settled promise's registrations at once
    assert "EXISTS" in said(fenced[0]) and fenced[1].endswith('; COMMIT"'), fenced
    settled = ("alone", "listened", "held", "fenced")
    assert {rows.fetch(Promise, id).state for id in settled} == {"resolved"}

    # A fulfill that resumes its suspended awaiter: that query string writes nothing; then the awaiter's lock and task
    # read go with the promise's own lock, and the settlement, the awaiter's write and its execute with the COMMIT.
    target = {"resonate:target": "poll://any@g"}
    versions = {}
    for id in ("parent", "child"):
        action = {"kind": "promise.create", "head": {}, "data": {"id": id, "timeoutAt": 10**13, "tags": target}}
        versions[id] = answer(envelope("task.create", {"pid": "w", "ttl": 60_000, "action": action}))
        versions[id] = versions[id]["data"]["task"]["version"]
    callback = {"kind": "promise.register_callback", "head": {}, "data": {"awaited": "child", "awaiter": "parent"}}
    suspend = {"id": "parent", "version": versions["parent"], "actions": [callback]}
    assert answer(envelope("task.suspend", suspend))["head"]["status"] == 200
    settle = {"kind": "promise.settle", "head": {}, "data": {"id": "child", "state": "resolved", "value": {}}}
    resumed = round_trips(envelope("task.fulfill", {"id": "child", "version": versions["child"], "action": settle}))
    assert len(resumed) == 3, resumed
    locks = said(resumed[1])
    assert locks.count("FOR UPDATE") == 2 and '"awaiter_id" FROM' in locks, resumed  # child; its awaiters
    assert first(resumed[2]).startswith('UPDATE "promises_promise"'), resumed  # the settlement, first
    assert "outbox_message" in said(resumed[2]) and resumed[2].endswith('; COMMIT"'), resumed  # resume, execute
    assert rows.fetch(Promise, "child").state == "resolved"
    from tasks.models import Task

    assert rows.fetch(Task, "parent").state == "pending"

    # Acquiring the resumed task: the promise's lock, the task's write and the reads for the reply, in one string.
    version = answer(envelope("task.get", {"id": "parent"}))["data"]["task"]["version"]
    acquire = {"id": "parent", "version": version, "pid": "w", "ttl": 60_000}
    acquired = round_trips(envelope("task.acquire", acquire))
    assert len(acquired) == 1 and first(acquired[0]).startswith("WITH held AS MATERIALIZED"), acquired
    assert rows.fetch(Task, "parent").state == "acquired"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_fulfils_skip_their_one_round_trip_while_those_before_them_mostly_had_something_registered(
    tmp_path, monkeypatch
):
    """task.fulfill's first step (one query string in autocommit) writes nothing when the promise has a listener or an
    awaiter, as the SDKs' promises mostly do, and costs a round trip before the transaction that answers. Once the
    last fulfils in the process were mostly so (tasks.handlers.FULFILLS), the transaction runs at once; once they
    were mostly not, the first step is tried again. Every answer is the same either way."""
    from tasks import handlers

    monkeypatch.setattr(handlers, "FULFILLS", handlers.Hunch(memory=4))

    def fulfil(id, listened):
        action = {"kind": "promise.create", "head": {}, "data": {"id": id, "timeoutAt": 10**13}}
        created = answer(envelope("task.create", {"pid": "w", "ttl": 60_000, "action": action}))
        if listened:
            listen = {"awaited": id, "address": "poll://uni@g/w"}
            assert answer(envelope("promise.register_listener", listen))["head"]["status"] == 200
        settle = {"kind": "promise.settle", "head": {}, "data": {"id": id, "state": "resolved", "value": {}}}
        trips = traced(
            envelope("task.fulfill", {"id": id, "version": created["data"]["task"]["version"], "action": settle}),
            tmp_path,
        )
        assert answer(envelope("promise.get", {"id": id}))["data"]["promise"]["state"] == "resolved"
        # not counted: psycopg preparing a statement it has sent often enough, once a connection
        return len([trip for trip in trips if not (trip.startswith("Parse") and "Execute" not in trip)])

    # listened: the first step tried and writing nothing (1), then the transaction (3: the lock, the settlement
    # taking the listener, the unblock with COMMIT), until the guess turns
    assert [fulfil(f"l{n}", True) for n in range(4)] == [4, 4, 3, 3]
    # nothing registered: the transaction alone (the lock, the writes with COMMIT), until the guess turns back; then
    # the one query string
    assert [fulfil(f"u{n}", False) for n in range(4)] == [2, 2, 2, 1]


def test_a_hunch_follows_the_most_of_what_went_lately():
    from tasks.handlers import Hunch

    hunch = Hunch(memory=4)
    assert hunch.likely  # tried at first
    outcomes = []
    for at_once in [False] * 6 + [True] * 3 + [False, True] * 3:
        hunch.went(at_once=at_once)
        outcomes.append(hunch.likely)
    assert outcomes == [
        True,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        True,
        False,
        True,
        False,
        True,
        False,
        True,
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("awaited", ["itself", "another"])
def test_a_fulfill_whose_awaiters_come_locked_with_its_promise_resumes_them_as_the_settlement_would(awaited):
    """The awaiters' tasks are read before the settlement's writes: a task awaiting its own promise must still
    find it fulfilled, and record no resume of itself, as when they were read after those writes."""
    target = {"resonate:target": "poll://any@g"}
    versions = {}
    for id in ("self", "other"):
        action = {"kind": "promise.create", "head": {}, "data": {"id": id, "timeoutAt": 10**13, "tags": target}}
        created = answer(envelope("task.create", {"pid": "w", "ttl": 60_000, "action": action}))
        assert created["head"]["status"] == 200, created
        versions[id] = created["data"]["task"]["version"]
    awaiter = "self" if awaited == "itself" else "other"
    callback = {"awaited": "self", "awaiter": awaiter}
    assert answer(envelope("promise.register_callback", callback))["head"]["status"] == 200
    settle = {"kind": "promise.settle", "head": {}, "data": {"id": "self", "state": "resolved", "value": {}}}
    fulfilled = answer(envelope("task.fulfill", {"id": "self", "version": versions["self"], "action": settle}))
    assert fulfilled["head"]["status"] == 200, fulfilled
    tasks = {id: answer(envelope("task.get", {"id": id}))["data"]["task"] for id in ("self", "other")}
    assert tasks["self"]["state"] == "fulfilled" and tasks["self"]["resumes"] == 0, tasks
    from tasks.models import Task

    assert rows.fetch(Task, "self").resumes == []  # as stored, not only as projected
    # An acquired awaiter records the resume, to be told at its next suspend.
    assert tasks["other"]["resumes"] == (1 if awaited == "another" else 0), tasks


@pytest.mark.django_db
@pytest.mark.parametrize("shortage", ["OutOfMemory", "DiskFull", "TooManyConnections", "ConfigurationLimitExceeded"])
def test_a_database_short_of_a_resource_is_retried_then_a_503_not_a_500(shortage, monkeypatch):
    """PostgreSQL's class 53 (the lock table full: "out of shared memory"; out of memory, disk, connections) passes
    as other work ends: the operation runs again, and a caller it keeps failing gets a 503 to retry, not a 500. Seen
    when several test runs shared the machine's PostgreSQL (max_locks_per_transaction 64): a debug.reset answered
    500."""
    import psycopg
    from django.db import OperationalError

    from floor import transactions
    from floor.transactions import Busy, lost_race, run_atomically

    def short():
        raise OperationalError("out of shared memory") from getattr(psycopg.errors, shortage)("out of shared memory")

    try:
        short()
    except OperationalError as error:
        assert lost_race(error)
    calls = []

    def operation():
        calls.append(1)
        short()

    monkeypatch.setattr(transactions.time, "sleep", lambda seconds: None)
    with pytest.raises(Busy):
        run_atomically(operation)
    assert len(calls) > 1  # run again before giving up


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_function_stale_after_a_column_s_type_changed_is_made_again(sent_before):
    """A rolling upgrade changed a column's type under a running process: its function still returns the old type
    (datatype_mismatch). The call says so (function_remade: floor.transactions runs the operation again), and the
    next send describes the statements again and makes the function of the new types."""
    from django.db import DatabaseError

    from floor.transactions import run_atomically

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS stale_kind; CREATE TABLE stale_kind (id text PRIMARY KEY, n integer)")
        cursor.execute("INSERT INTO stale_kind VALUES ('a', 1)")
    parts = [("SELECT n FROM stale_kind WHERE id = %s", ["a"]), ("SELECT %s::text", ["b"])]
    try:
        assert rows.send_all(connection, parts) == [[(1,)], [("b",)]]
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE stale_kind ALTER COLUMN n TYPE bigint")
        with pytest.raises(DatabaseError) as failed:
            rows.send_all(connection, parts)
        assert failed.value.function_remade
        assert run_atomically(rows.send_all, connection, parts) == [[(1,)], [("b",)]]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE stale_kind")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_making_a_function_never_waits_behind_a_lock_its_own_request_holds(sent_before, monkeypatch):
    """A request's transaction holds a lock; a migration's ALTER queues behind it; the request then sends statements
    that would become a function. Describing them on the side connection would wait for the ALTER, which waits for
    the request: a cycle PostgreSQL cannot see. The side connection gives up within its lock_timeout, the statements
    go as a string, no function is made for a while, and the ALTER goes through once the request commits."""
    from django.db import transaction

    monkeypatch.setattr(functions, "_paused_until", 0.0)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS queued; CREATE TABLE queued (id text PRIMARY KEY)")
    altered = []

    def alter():
        import psycopg

        params = connection.get_connection_params()
        with psycopg.connect(**{**params, "autocommit": True}) as other:
            other.execute("SET lock_timeout = '20s'")
            other.execute("ALTER TABLE queued ADD COLUMN later integer")
            altered.append(time.monotonic())

    try:
        with transaction.atomic():
            rows.query("SELECT count(*) FROM queued")  # the request holds its lock from here
            migrating = threading.Thread(target=alter)
            migrating.start()
            time.sleep(0.3)  # the ALTER is queued behind it
            started = time.monotonic()
            found = rows.send_all(connection, [("SELECT count(*) FROM queued WHERE id <> %s", ["x"]), ("SELECT 1", [])])
            waited = time.monotonic() - started
            assert found == [[(0,)], [(1,)]]
            assert waited < 1.5, waited
            assert functions._paused_until > time.monotonic()  # no function made for a while
            assert not altered
        migrating.join(10)
        assert altered
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS queued")
