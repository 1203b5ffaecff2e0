"""The embedded server by itself: timeouts fire, awaiters resume and messages reach workers over SSE."""

from tests.e2e.servers import Client, Listener, now_ms

WORKERS = "poll://any@workers"


def callback(awaited, awaiter):
    return {"kind": "promise.register_callback", "head": {}, "data": {"awaited": awaited, "awaiter": awaiter}}


def test_a_promise_that_times_out_unblocks_its_listener_and_resumes_its_awaiter(embedded):
    rpc, worker = Client(embedded.url), Listener(embedded.url, "workers", "w1")
    start = now_ms()
    assert rpc("promise.create", {"id": "wf", "timeoutAt": start + 60_000, "tags": {"resonate:target": WORKERS}})[0] == 200
    assert worker.next(kind="execute")["data"]["task"] == {"id": "wf", "version": 0}
    assert rpc("task.acquire", {"id": "wf", "version": 0, "pid": "w1", "ttl": 30_000})[0] == 200
    deadline = now_ms() + 1500
    assert rpc("promise.create", {"id": "wf.1", "timeoutAt": deadline, "tags": {"resonate:external": "true"}})[0] == 200
    assert rpc("promise.register_listener", {"awaited": "wf.1", "address": "poll://uni@workers/w1"})[0] == 200
    assert rpc("task.suspend", {"id": "wf", "version": 1, "actions": [callback("wf.1", "wf")]})[0] == 200

    unblock = worker.next(kind="unblock", timeout=10)
    execute = worker.next(kind="execute", match=lambda e: e["data"]["task"]["version"] == 1, timeout=10)

    assert unblock["data"]["promise"]["id"] == "wf.1"
    assert unblock["data"]["promise"]["state"] == "rejected_timedout"
    assert unblock["data"]["promise"]["settledAt"] == deadline
    assert 0 <= unblock["received_at"] - deadline < 1000
    assert execute["data"]["task"] == {"id": "wf", "version": 1}
    assert execute["head"] == {"serverUrl": ""}
    assert rpc("task.get", {"id": "wf"})[1]["task"]["state"] == "pending"


def test_a_lapsed_lease_returns_the_task_and_its_execute_is_sent_again(embedded):
    rpc, worker = Client(embedded.url), Listener(embedded.url, "workers", "w1")
    rpc("promise.create", {"id": "job", "timeoutAt": now_ms() + 60_000, "tags": {"resonate:target": WORKERS}})
    worker.next(kind="execute")
    assert rpc("task.acquire", {"id": "job", "version": 0, "pid": "w1", "ttl": 1000})[0] == 200
    worker.drain()

    again = worker.next(kind="execute", timeout=10)

    assert again["data"]["task"] == {"id": "job", "version": 1}
    assert rpc("task.get", {"id": "job"})[1]["task"]["state"] == "pending"
    assert rpc("task.acquire", {"id": "job", "version": 1, "pid": "w2", "ttl": 60_000})[0] == 200


def test_a_pending_task_gets_its_execute_again_every_retry_timeout(embedded):
    rpc, worker = Client(embedded.url), Listener(embedded.url, "workers", "w1")
    rpc("promise.create", {"id": "job", "timeoutAt": now_ms() + 60_000, "tags": {"resonate:target": WORKERS}})
    first = worker.next(kind="execute")
    second = worker.next(kind="execute", timeout=5)
    third = worker.next(kind="execute", timeout=5)
    assert first["data"] == second["data"] == third["data"] == {"task": {"id": "job", "version": 0}}
    assert 700 <= third["received_at"] - second["received_at"] <= 2000


def test_a_schedule_with_a_seconds_cron_fires_every_second(embedded):
    rpc, worker = Client(embedded.url), Listener(embedded.url, "workers", "w1")
    schedule = {"id": "tick", "cron": "* * * * * *", "promiseId": "tick.{{.timestamp}}", "promiseTimeout": 60_000,
                "promiseTags": {"resonate:target": WORKERS}}
    assert rpc("schedule.create", schedule)[0] == 200
    ids = set()
    while len(ids) < 3:  # retries re-send executes too; count distinct occurrences
        ids.add(worker.next(kind="execute", timeout=5)["data"]["task"]["id"])
    assert all(id.startswith("tick.") and int(id[5:]) % 1000 == 0 for id in ids)
    assert rpc("schedule.get", {"id": "tick"})[1]["schedule"]["lastRunAt"] >= max(int(id[5:]) for id in ids)
