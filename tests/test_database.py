"""Database behaviour the protocol relies on: connections that die, announcements made on commit."""

import pytest
from django.db import connection

from resonate_site.protocol.envelope import answer


def envelope(kind, data):
    import orjson

    return orjson.dumps({"kind": kind, "head": {"corrId": "c", "version": "2026-04-01"}, "data": data})


@pytest.mark.postgres  # only PostgreSQL connections can be closed by the server
@pytest.mark.django_db(transaction=True)
def test_a_request_after_the_database_dropped_the_connection_succeeds_on_a_new_one():
    assert answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))["head"]["status"] == 200
    old_pid = connection.connection.info.backend_pid
    with connection._nodb_cursor() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [old_pid])

    reply = answer(envelope("promise.get", {"id": "p"}))

    assert reply["head"]["status"] == 200 and reply["data"]["promise"]["id"] == "p"
    assert connection.connection.info.backend_pid != old_pid


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
def test_a_database_that_refuses_connections_gets_a_503_envelope_then_service_resumes(through_proxy):
    through_proxy("refuse")

    refused = answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))

    assert refused["head"]["status"] == 503 and refused["data"] == "Database unavailable, please retry"
    through_proxy("accept")
    assert answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))["head"]["status"] == 200


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

    monkeypatch.setitem(dispatch.OPERATIONS, "promise.create", operation._replace(handler=create_then_cut))

    reply = answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))

    assert reply["head"]["status"] == 503 and runs == ["p"]


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

    def stalled_delivery(keys, limit, only=None):
        delivered.append((keys, only))
        stalled.wait(30)  # the hub or the database as slow as can be
        return keys

    monkeypatch.setattr(dispatch, "deliver", stalled_delivery)
    body = envelope("promise.create", {"id": "wf", "timeoutAt": 10**13, "tags": {"resonate:target": "poll://any@g"}})

    started = time.monotonic()
    reply = answer(body)
    answered_in = time.monotonic() - started
    deadline = time.monotonic() + 5
    while not delivered and time.monotonic() < deadline:
        time.sleep(0.01)
    stalled.set()

    assert reply["head"]["status"] == 200 and answered_in < 5
    assert delivered == [(["e:wf"], dispatch.Transport.POLL)]  # poll messages straight to the hub, from its thread


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
