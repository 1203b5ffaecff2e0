"""Database behaviour the protocol relies on: connections that die between requests."""

import pytest
from django.db import connection

from resonate_site.protocol.envelope import answer

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="only PostgreSQL connections can be closed by the server"
)


def envelope(kind, data):
    import orjson

    return orjson.dumps({"kind": kind, "head": {"corrId": "c", "version": "2026-04-01"}, "data": data})


@pytest.mark.django_db(transaction=True)
def test_a_request_after_the_database_dropped_the_connection_succeeds_on_a_new_one():
    assert answer(envelope("promise.create", {"id": "p", "timeoutAt": 10**13}))["head"]["status"] == 200
    old_pid = connection.connection.info.backend_pid
    with connection._nodb_cursor() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [old_pid])

    reply = answer(envelope("promise.get", {"id": "p"}))

    assert reply["head"]["status"] == 200 and reply["data"]["promise"]["id"] == "p"
    assert connection.connection.info.backend_pid != old_pid
