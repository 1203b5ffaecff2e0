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
