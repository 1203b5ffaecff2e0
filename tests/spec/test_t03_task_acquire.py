"""T-03 task.acquire: 404; 409 unless pending, live and current; then acquired at version + 1 with a lease."""

import pytest

from tests.conftest import action, create, targeted


def acquire(protocol, id, now, version=0, pid="w", ttl=1_000):
    return protocol("task.acquire", {"id": id, "version": version, "pid": pid, "ttl": ttl}, now=now)


# T-03:6-8


def test_it_answers_404_for_a_missing_task(protocol):
    assert acquire(protocol, "nope", now=0).status == 404


def test_it_answers_404_for_a_promise_without_a_task(protocol):
    protocol("promise.create", create("p"), now=0)
    assert acquire(protocol, "p", now=1).status == 404


# T-03:10-12 (a task without its promise) cannot be reached through POST /.


# T-03:14 — the task is not pending.


def test_it_answers_409_when_the_task_is_already_acquired(protocol):
    protocol("promise.create", targeted("p"), now=0)
    assert acquire(protocol, "p", now=1, pid="w1").status == 200
    before = protocol.snap()
    assert acquire(protocol, "p", now=2, version=1, pid="w2").status == 409
    assert protocol.snap() == before


def test_it_answers_409_when_the_task_is_suspended(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("p"), now=0)
    acquire(protocol, "p", now=1)
    suspended = protocol(
        "task.suspend",
        {"id": "p", "version": 1, "actions": [action("promise.register_callback", {"awaited": "a", "awaiter": "p"})]},
        now=2,
    )
    assert suspended.status == 200
    assert acquire(protocol, "p", now=3, version=1).status == 409


def test_it_answers_409_when_the_task_is_halted(protocol):
    protocol("promise.create", targeted("p"), now=0)
    protocol("task.halt", {"id": "p"}, now=1)
    assert acquire(protocol, "p", now=2).status == 409
    assert protocol.snap()["tasks"][0]["state"] == "halted"


def test_it_answers_409_when_the_task_is_fulfilled(protocol):
    protocol("promise.create", targeted("p"), now=0)
    protocol("promise.settle", {"id": "p", "state": "resolved"}, now=1)
    assert acquire(protocol, "p", now=2).status == 409


# T-03:15 — the task is pending but its promise is past its deadline.


def test_it_answers_409_when_the_promise_has_expired(protocol):
    protocol("promise.create", targeted("p", timeout_at=100), now=0)
    before = protocol.snap()
    assert acquire(protocol, "p", now=100).status == 409
    assert protocol.snap() == before


# T-03:16 — the version is not the task's current version.


@pytest.mark.parametrize("version", [1, 7])
def test_it_answers_409_when_the_version_is_not_current(protocol, version):
    protocol("promise.create", targeted("p"), now=0)
    before = protocol.snap()
    assert acquire(protocol, "p", now=1, version=version).status == 409
    assert protocol.snap() == before


def test_it_answers_409_to_a_stale_execute_after_a_reacquire(protocol):
    protocol("promise.create", targeted("p"), now=0)
    acquire(protocol, "p", now=1, ttl=100)
    protocol.tick(101)  # lease lapses: pending at version 1
    assert acquire(protocol, "p", now=200, version=0).status == 409
    assert acquire(protocol, "p", now=200, version=1).status == 200


# T-03:17-21 — acquired at the next version, with a lease at now + ttl replacing the retry timeout.


def test_it_acquires_a_pending_task(protocol):
    created = protocol("promise.create", targeted("p"), now=0)
    answer = acquire(protocol, "p", now=10, pid="w-7", ttl=60_000)
    assert answer.status == 200
    task = {"id": "p", "state": "acquired", "version": 1, "resumes": 0, "ttl": 60_000, "pid": "w-7"}
    assert answer.data == {"task": task, "promise": created.data["promise"], "preload": []}
    snap = protocol.snap()
    assert snap["tasks"] == [task]
    assert snap["taskTimeouts"] == [{"id": "p", "type": 1, "timeout": 60_010}]


def test_it_clears_the_resumes_of_the_task_it_acquires(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("p"), now=0)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "p"}, now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    assert protocol("task.get", {"id": "p"}, now=3).data["task"]["resumes"] == 1
    assert acquire(protocol, "p", now=4).data["task"]["resumes"] == 0


def test_it_acquires_a_resumed_task_at_the_version_of_its_execute(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("p"), now=0)
    acquire(protocol, "p", now=1)
    protocol(
        "task.suspend",
        {"id": "p", "version": 1, "actions": [action("promise.register_callback", {"awaited": "a", "awaiter": "p"})]},
        now=2,
    )
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=3)
    [message] = protocol.snap()["messages"]
    version = message["message"]["data"]["task"]["version"]
    assert version == 1
    answer = acquire(protocol, "p", now=4, version=version)
    assert answer.status == 200
    assert answer.data["task"]["version"] == 2
    assert answer.data["task"]["resumes"] == 0


# Decision D6: preload is the other promises of the task promise's branch, by id, projected.


def test_it_returns_the_same_branch_promises_as_preload(protocol):
    protocol("promise.create", targeted("wf", tags={"resonate:branch": "wf"}), now=0)
    protocol("promise.create", create("wf.2", timeout_at=50, tags={"resonate:branch": "wf"}), now=0)
    protocol("promise.create", create("wf.1", tags={"resonate:branch": "wf"}), now=0)
    protocol("promise.create", create("wf.3", tags={"resonate:branch": "wf.3"}), now=0)
    answer = acquire(protocol, "wf", now=60)
    assert answer.data["preload"] == [
        {
            "id": "wf.1",
            "state": "pending",
            "param": {},
            "value": {},
            "tags": {"resonate:branch": "wf"},
            "timeoutAt": 10_000,
            "createdAt": 0,
        },
        {
            "id": "wf.2",
            "state": "rejected_timedout",
            "param": {},
            "value": {},
            "tags": {"resonate:branch": "wf"},
            "timeoutAt": 50,
            "createdAt": 0,
            "settledAt": 50,
        },
    ]


def test_it_returns_no_preload_when_the_promise_has_no_branch(protocol):
    protocol("promise.create", targeted("wf"), now=0)
    protocol("promise.create", create("wf.1", tags={"resonate:branch": "wf"}), now=0)
    assert acquire(protocol, "wf", now=1).data["preload"] == []
