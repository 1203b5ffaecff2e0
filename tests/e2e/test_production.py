"""Production mode: several server processes, the sweep and delivery in Celery, streams meeting in Redis."""

import signal
import threading
import time

import pytest

from resonate_site.management.commands.serve import GRACE_S
from tests.e2e.conftest import start_embedded
from tests.e2e.servers import Client, Listener, assert_clean_logs, attempts, now_ms

pytestmark = pytest.mark.postgres  # production mode runs on PostgreSQL


def callback(awaited, awaiter):
    return {"kind": "promise.register_callback", "head": {}, "data": {"awaited": awaited, "awaiter": awaiter}}


def test_a_timeout_fired_by_celery_reaches_a_listener_on_another_server_process(production, unique):
    a, b = production.servers
    rpc, worker = Client(b.url), Listener(a.url, unique, "w1")  # the stream on A, requests to B
    wf, child = f"{unique}.wf", f"{unique}.wf.1"
    rpc(
        "promise.create",
        {"id": wf, "timeoutAt": now_ms() + 60_000, "tags": {"resonate:target": f"poll://any@{unique}"}},
    )
    assert worker.next(kind="execute", timeout=20)["data"]["task"] == {"id": wf, "version": 0}
    assert rpc("task.acquire", {"id": wf, "version": 0, "pid": "w1", "ttl": 30_000})[0] == 200
    deadline = now_ms() + 2000
    rpc("promise.create", {"id": child, "timeoutAt": deadline, "tags": {"resonate:timer": "true"}})
    rpc("promise.register_listener", {"awaited": child, "address": f"poll://uni@{unique}/w1"})
    assert rpc("task.suspend", {"id": wf, "version": 1, "actions": [callback(child, wf)]})[0] == 200

    unblock = worker.next(kind="unblock", timeout=15)
    execute = worker.next(kind="execute", match=lambda e: e["data"]["task"]["version"] == 1, timeout=15)

    assert unblock["data"]["promise"]["state"] == "resolved" and unblock["data"]["promise"]["settledAt"] == deadline
    assert unblock["received_at"] - deadline < 1500
    assert execute["data"]["task"] == {"id": wf, "version": 1}
    assert Client(a.url)("task.get", {"id": wf})[1]["task"]["state"] == "pending"


def test_killing_the_celery_worker_mid_sweep_loses_no_timeout_and_no_message(production, unique):
    a, b = production.servers
    rpc, listener = Client(a.url), Listener(b.url, unique, "l")
    deadline = now_ms() + 8000
    ids = [f"{unique}-{n}" for n in range(150)]
    for id in ids:
        rpc("promise.create", {"id": id, "timeoutAt": deadline, "tags": {"resonate:external": "true"}})
        rpc("promise.register_listener", {"awaited": id, "address": f"poll://uni@{unique}/l"})
    assert now_ms() < deadline - 500, "listeners must be registered before the deadline (P-05)"
    while now_ms() < deadline + 30:
        threading.Event().wait(0.005)
    production.worker.kill(signal.SIGKILL)  # in the middle of sweeping and delivering these
    production.start_worker()

    seen = set()
    while len(seen) < len(ids):
        seen.add(listener.next(kind="unblock", timeout=30)["data"]["promise"]["id"])

    assert seen == set(ids)
    found = rpc("promise.search", {"tags": {"resonate:external": "true"}, "limit": 1000})[1]["promises"]
    states = {p["id"]: p for p in found}
    assert all(states[id]["state"] == "rejected_timedout" and states[id]["settledAt"] == deadline for id in ids)


def test_anycast_reaches_streams_held_by_either_server_process(production, unique):
    a, b = production.servers
    rpc = Client(a.url)
    on_a, on_b = Listener(a.url, unique, "a"), Listener(b.url, unique, "b")
    ids = {f"{unique}-{n}" for n in range(20)}
    for id in ids:
        rpc(
            "promise.create",
            {"id": id, "timeoutAt": now_ms() + 60_000, "tags": {"resonate:target": f"poll://any@{unique}"}},
        )
    got, started = {}, now_ms()
    while set(got) < ids:
        assert now_ms() - started < 20_000, f"executes missing: {ids - set(got)}"
        for name, listener in (("a", on_a), ("b", on_b)):
            for event in listener.drain():
                if event["kind"] == "execute" and event["data"]["task"]["version"] == 0:
                    got.setdefault(event["data"]["task"]["id"], set()).add(name)
        threading.Event().wait(0.1)
    assert set().union(*got.values()) == {"a", "b"}  # both processes' streams took work (2^-19 to fail by chance)


def test_a_message_nobody_could_take_waits_for_a_stream_and_goes_when_one_connects_to_either_process(
    production, unique
):
    """An unblock whose listener has no stream is not tried again every POLL_RETRY_MS by the Celery worker (a row
    update each time: production's create at 1 client ran at a fifth of its speed with nobody listening); it waits
    for its group's next stream (outbox.delivery.joins_heard) or the end of its grace. The server process the stream
    connects to makes it due and sends it: one attempt more, long before its grace ends."""
    a, b = production.servers
    rpc, database_url = Client(a.url), production.env["DATABASE_URL"]
    assert rpc("promise.create", {"id": unique, "timeoutAt": now_ms() + 60_000})[0] == 200
    assert rpc("promise.register_listener", {"awaited": unique, "address": f"poll://uni@{unique}/c1"})[0] == 200
    assert rpc("promise.settle", {"id": unique, "state": "resolved", "value": {}})[0] == 200
    threading.Event().wait(2)  # four retries' worth, and two of Beat's delivery passes
    assert attempts(database_url, "unblock", unique) == 1

    connecting = now_ms()
    unblock = Listener(b.url, unique, "c1").next(kind="unblock", timeout=5)

    assert unblock["data"]["promise"]["id"] == unique
    assert unblock["received_at"] - connecting < 2000  # its grace (10 s) had 8 s to run
    assert attempts(database_url, "unblock", unique) == 2


def test_a_server_told_to_stop_ends_its_streams_at_once_and_its_worker_gets_its_messages_from_another(
    production, unique, tmp_path
):
    """SIGTERM (a rolling restart, supervisord's stop): the server takes no new connection and lets requests in
    flight finish within serve's grace (GRACE_S, 5 s); its streams end at once, sending first what was routed to
    them, so that their workers reconnect to another server rather than wait out the grace."""
    leaving = start_embedded(production.servers[0].env, tmp_path / "leaving.log")  # a third server, to stop
    staying = production.servers[1]
    worker = Listener(leaving.url, unique, "w1")
    worker.url = staying.url  # where the worker reconnects once its stream ends
    told = time.monotonic()
    leaving.process.popen.terminate()
    leaving.process.popen.wait(timeout=20)
    gone_s = time.monotonic() - told
    leaving.process.stop()
    assert gone_s < GRACE_S / 2, f"the server took {gone_s:.1f} s to stop: its stream waited for the grace"
    assert_clean_logs(tmp_path)

    Client(staying.url)(
        "promise.create",
        {"id": unique, "timeoutAt": now_ms() + 60_000, "tags": {"resonate:target": f"poll://any@{unique}"}},
    )
    assert worker.next(kind="execute", timeout=15)["data"]["task"]["id"] == unique
    assert worker.connects == 2


def test_a_request_on_an_idle_connection_of_a_server_told_to_stop_is_answered_and_told_to_go_elsewhere(
    production, unique, tmp_path
):
    """A client may send its next request on a kept-alive connection at the moment the server is told to stop. Closed
    at once, as uvicorn closes idle connections, that POST would fail ("fetch failed" in the released TypeScript SDK,
    which does not send it again): the connection stays open for a moment, the request is answered with
    `Connection: close`, and the client's next request connects elsewhere."""
    from http.client import HTTPConnection
    from urllib.parse import urlsplit

    import orjson

    leaving = start_embedded(production.servers[0].env, tmp_path / "leaving.log")
    address = urlsplit(leaving.url)
    http = HTTPConnection(address.hostname, address.port, timeout=10)
    head = {"corrId": "c", "version": "2026-04-01"}
    body = orjson.dumps({"kind": "promise.get", "head": head, "data": {"id": unique}})
    http.request("POST", "/", body=body, headers={"Content-Type": "application/json"})
    first = http.getresponse()
    first.read()
    assert first.status == 404 and first.getheader("Connection") != "close"  # answered (no such promise), kept alive

    leaving.process.popen.terminate()
    time.sleep(0.2)  # the server has begun to stop; the connection is idle
    http.request("POST", "/", body=body, headers={"Content-Type": "application/json"})
    last = http.getresponse()
    assert last.status == 404 and orjson.loads(last.read())["head"]["status"] == 404
    assert last.getheader("Connection") == "close"
    http.close()
    leaving.process.popen.wait(timeout=20)
    leaving.process.stop()
    assert_clean_logs(tmp_path)
