"""T-07 task.fulfill: 404; 409 unless acquired, live and current; then the promise settles and the task is fulfilled."""

import pytest

from tests.conftest import TARGET, action, create, execute, targeted


def start(protocol, id="w", now=0, ttl=1_000, timeout_at=10_000):
    protocol("promise.create", targeted(id, timeout_at), now=now)
    answer = protocol("task.acquire", {"id": id, "version": 0, "pid": "w", "ttl": ttl}, now=now)
    assert answer.status == 200


def fulfill(protocol, now, id="w", version=1, state="resolved", value=None, action_id=None):
    data = {"id": action_id or id, "state": state}
    if value is not None:
        data["value"] = value
    return protocol("task.fulfill", {"id": id, "version": version, "action": action("promise.settle", data)}, now=now)


def suspend(protocol, id, awaited, now, version=1):
    actions = [action("promise.register_callback", {"awaited": awaited, "awaiter": id})]
    answer = protocol("task.suspend", {"id": id, "version": version, "actions": actions}, now=now)
    assert answer.status == 200


# T-07:6-8


def test_it_answers_404_for_a_missing_task(protocol):
    assert fulfill(protocol, now=0).status == 404


def test_it_answers_404_for_a_promise_without_a_task(protocol):
    protocol("promise.create", create("w"), now=0)
    assert fulfill(protocol, now=1).status == 404
    assert protocol.snap()["promises"][0]["state"] == "pending"


# T-07:10-12 (a task without its promise) cannot be reached through POST /.


# T-07:14 — the task is not acquired.


def test_it_answers_409_when_the_task_is_pending(protocol):
    protocol("promise.create", targeted("w"), now=0)
    before = protocol.snap()
    assert fulfill(protocol, now=1, version=0).status == 409
    assert protocol.snap() == before


def test_it_answers_409_when_the_task_is_already_fulfilled(protocol):
    start(protocol)
    assert fulfill(protocol, now=1).status == 200
    before = protocol.snap()
    assert fulfill(protocol, now=2, state="rejected").status == 409
    assert protocol.snap() == before


# T-07:15 — the task's promise is past its deadline: the expired promise cannot be fulfilled.


def test_it_answers_409_when_the_task_promise_has_expired(protocol):
    start(protocol, timeout_at=100)
    before = protocol.snap()
    assert fulfill(protocol, now=100).status == 409
    assert protocol.snap() == before


# T-07:16 — the version is stale.


def test_it_answers_409_when_the_version_is_stale(protocol):
    start(protocol, ttl=100)
    protocol.tick(100)  # the lease lapses: pending at version 1
    assert protocol("task.acquire", {"id": "w", "version": 1, "pid": "w2", "ttl": 1_000}, now=200).status == 200
    before = protocol.snap()
    assert fulfill(protocol, now=201, version=1).status == 409  # the first worker's token
    assert protocol.snap() == before
    assert fulfill(protocol, now=202, version=2).status == 200


# T-07:17-23 — the promise takes the action's state and value, settled now; the task is fulfilled.


@pytest.mark.parametrize("state", ["resolved", "rejected", "rejected_canceled"])
def test_it_settles_the_task_promise_and_fulfils_the_task(protocol, state):
    start(protocol)
    answer = fulfill(protocol, now=30, state=state, value={"data": "eA=="})
    assert answer.status == 200
    record = {
        "id": "w",
        "state": state,
        "param": {},
        "value": {"data": "eA=="},
        "tags": {"resonate:target": TARGET},
        "timeoutAt": 10_000,
        "createdAt": 0,
        "settledAt": 30,
    }
    assert answer.data == {"promise": record}
    snap = protocol.snap()
    assert snap["promises"] == [record]
    assert snap["tasks"] == [{"id": "w", "state": "fulfilled", "version": 1, "resumes": 0}]
    assert snap["promiseTimeouts"] == []
    assert snap["taskTimeouts"] == []


def test_it_settles_the_task_promise_whatever_id_the_action_names(protocol):
    # T-07:19 uses only the action's state and value; the task's own promise is the one settled.
    start(protocol)
    protocol("promise.create", create("other"), now=0)
    answer = fulfill(protocol, now=5, action_id="other")
    assert answer.status == 200
    assert answer.data["promise"]["id"] == "w"
    states = {p["id"]: p["state"] for p in protocol.snap()["promises"]}
    assert states == {"other": "pending", "w": "resolved"}


# T-07:24-30 — the settlement scrub: the task's own registrations as an awaiter go.


def test_it_scrubs_the_callbacks_of_the_fulfilled_task(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "w"}, now=1)
    assert protocol.snap()["callbacks"] == [{"awaiter": "w", "awaited": "a"}]
    fulfill(protocol, now=2)
    assert protocol.snap()["callbacks"] == []


# T-07:31-32 — every listener of the promise gets an unblock.


def test_it_sends_an_unblock_to_every_listener(protocol):
    start(protocol)
    protocol("promise.register_listener", {"awaited": "w", "address": "poll://uni@g/c"}, now=1)
    answer = fulfill(protocol, now=2, value={"data": "eA=="})
    snap = protocol.snap()
    assert snap["listeners"] == []
    unblock = {"kind": "unblock", "head": {}, "data": {"promise": answer.data["promise"]}}
    assert {"address": "poll://uni@g/c", "message": unblock} in snap["messages"]


# T-07:33-34 — every awaiter of the promise is resumed.


def test_it_resumes_the_awaiters_of_the_promise(protocol):
    start(protocol, "child")
    start(protocol, "parent")
    suspend(protocol, "parent", "child", now=1)
    fulfill(protocol, now=10, id="child")
    snap = protocol.snap()
    assert {t["id"]: (t["state"], t["version"], t["resumes"]) for t in snap["tasks"]} == {
        "child": ("fulfilled", 1, 0),
        "parent": ("pending", 1, 1),
    }
    assert snap["taskTimeouts"] == [{"id": "parent", "type": 0, "timeout": 5_010}]
    assert execute("parent", 1) in snap["messages"]
