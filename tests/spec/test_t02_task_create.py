"""T-02 task.create: new → acquired (or born fulfilled); existing → 422 untargeted, fulfilled, acquire pending, 409."""

import pytest

from tests.conftest import TARGET, action, create, targeted

TIMER = {"resonate:timer": "true"}
BRANCH = {"resonate:target": TARGET, "resonate:branch": "wf"}


def task_create(protocol, data, now, pid="w", ttl=1_000):
    return protocol("task.create", {"pid": pid, "ttl": ttl, "action": action("promise.create", data)}, now=now)


def acquire(protocol, id, now, version=0, pid="w", ttl=1_000):
    answer = protocol("task.acquire", {"id": id, "version": version, "pid": pid, "ttl": ttl}, now=now)
    assert answer.status == 200
    return answer


# T-02:8-20 — no promise yet, deadline ahead: the promise is pending, its task acquired by the caller at
# version 1 with a lease; the promise timeout is always armed; nothing is dispatched.


def test_it_creates_the_promise_with_its_task_acquired_by_the_caller(protocol):
    answer = task_create(protocol, targeted("wf", timeout_at=10_000), now=100, pid="w-7", ttl=60_000)
    assert answer.status == 200
    promise = {
        "id": "wf",
        "state": "pending",
        "param": {},
        "value": {},
        "tags": {"resonate:target": TARGET},
        "timeoutAt": 10_000,
        "createdAt": 100,
    }
    task = {"id": "wf", "state": "acquired", "version": 1, "resumes": 0, "ttl": 60_000, "pid": "w-7"}
    assert answer.data == {"task": task, "promise": promise, "preload": []}
    snap = protocol.snap()
    assert snap["promises"] == [promise]
    assert snap["tasks"] == [task]
    assert snap["promiseTimeouts"] == [{"id": "wf", "timeout": 10_000}]
    assert snap["taskTimeouts"] == [{"id": "wf", "type": 1, "timeout": 60_100}]
    assert snap["messages"] == []


def test_it_arms_the_promise_timeout_even_without_a_target(protocol):
    # T-02:14 arms unconditionally, and decision D4 does not require a target.
    answer = task_create(protocol, create("wf", timeout_at=10_000), now=0)
    assert answer.status == 200
    assert answer.data["task"]["state"] == "acquired"
    snap = protocol.snap()
    assert snap["promiseTimeouts"] == [{"id": "wf", "timeout": 10_000}]
    assert snap["messages"] == []


def test_it_returns_the_same_branch_promises_as_preload_of_a_new_task(protocol):
    # Decision D6: preload = the other promises sharing the task promise's resonate:branch, by id, projected.
    protocol("promise.create", create("wf.2", timeout_at=50, tags={"resonate:branch": "wf"}), now=0)
    protocol("promise.create", create("wf.1", tags={"resonate:branch": "wf"}), now=0)
    protocol("promise.create", create("other", tags={"resonate:branch": "x"}), now=0)
    answer = task_create(protocol, create("wf", tags=BRANCH), now=100)
    preload = [(p["id"], p["state"]) for p in answer.data["preload"]]
    assert preload == [("wf.1", "pending"), ("wf.2", "rejected_timedout")]


def test_it_acquires_a_new_task_at_once_whatever_its_delay_tag_says(protocol):
    # T-02 has no resonate:delay branch (unlike P-02:26-39): the caller holds the task immediately.
    answer = task_create(protocol, targeted("wf", tags={"resonate:delay": "5000"}), now=0, ttl=1_000)
    assert answer.status == 200
    assert answer.data["task"]["state"] == "acquired"
    snap = protocol.snap()
    assert snap["taskTimeouts"] == [{"id": "wf", "type": 1, "timeout": 1_000}]
    assert snap["messages"] == []


# T-02:21-35 — no promise yet, deadline passed: the promise is born settled, its task born fulfilled.


def test_it_creates_an_expired_promise_timed_out_with_a_fulfilled_task(protocol):
    answer = task_create(protocol, targeted("wf", timeout_at=50), now=100)
    assert answer.status == 200
    assert answer.data == {
        "task": {"id": "wf", "state": "fulfilled", "version": 0, "resumes": 0},
        "promise": {
            "id": "wf",
            "state": "rejected_timedout",
            "param": {},
            "value": {},
            "tags": {"resonate:target": TARGET},
            "timeoutAt": 50,
            "createdAt": 50,
            "settledAt": 50,
        },
        "preload": [],
    }
    snap = protocol.snap()
    assert snap["promiseTimeouts"] == [] and snap["taskTimeouts"] == [] and snap["messages"] == []


def test_it_creates_an_expired_timer_resolved(protocol):
    answer = task_create(protocol, targeted("wf", timeout_at=100, tags=TIMER), now=100)
    assert answer.data["promise"]["state"] == "resolved"
    assert answer.data["promise"]["settledAt"] == 100
    assert answer.data["task"]["state"] == "fulfilled"


# T-02:37-38 — the promise exists without a target: 422.


def test_it_answers_422_when_the_promise_exists_without_a_target(protocol):
    protocol("promise.create", create("p"), now=0)
    before = protocol.snap()
    assert task_create(protocol, targeted("p"), now=1).status == 422
    assert protocol.snap() == before


# T-02:41-42 — the task is fulfilled: returned with its promise, nothing changes.


def test_it_returns_a_fulfilled_task_with_its_settled_promise(protocol):
    protocol("promise.create", targeted("p"), now=0)
    settled = protocol("promise.settle", {"id": "p", "state": "resolved", "value": {"data": "eA=="}}, now=1)
    before = protocol.snap()
    answer = task_create(protocol, targeted("p"), now=2)
    assert answer.status == 200
    assert answer.data == {
        "task": {"id": "p", "state": "fulfilled", "version": 0, "resumes": 0},
        "promise": settled.data["promise"],
        "preload": [],
    }
    assert protocol.snap() == before


# T-02:43-48 — the task is pending: the caller acquires it (version + 1, lease, resumes cleared).


def test_it_acquires_an_existing_pending_task(protocol):
    created = protocol("promise.create", targeted("p"), now=0)
    answer = task_create(protocol, targeted("p"), now=10, pid="w-2", ttl=3_000)
    assert answer.status == 200
    assert answer.data == {
        "task": {"id": "p", "state": "acquired", "version": 1, "resumes": 0, "ttl": 3_000, "pid": "w-2"},
        "promise": created.data["promise"],
        "preload": [],
    }
    assert protocol.snap()["taskTimeouts"] == [{"id": "p", "type": 1, "timeout": 3_010}]  # the retry is gone


def test_it_acquires_a_pending_task_at_the_next_version(protocol):
    protocol("promise.create", targeted("p"), now=0)
    acquire(protocol, "p", now=1, ttl=100)
    protocol.tick(101)  # the lease lapses: pending again at version 1
    answer = task_create(protocol, targeted("p"), now=200)
    assert answer.data["task"]["state"] == "acquired"
    assert answer.data["task"]["version"] == 2


def test_it_clears_the_resumes_of_a_pending_task_it_acquires(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("p"), now=0)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "p"}, now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    assert protocol("task.get", {"id": "p"}, now=3).data["task"]["resumes"] == 1
    answer = task_create(protocol, targeted("p"), now=4)
    assert answer.data["task"]["resumes"] == 0


def test_it_acquires_a_pending_task_without_checking_the_promise_deadline(protocol):
    # T-02:43-48 has no liveness check (unlike T-03:15).
    protocol("promise.create", targeted("p", timeout_at=100), now=0)
    answer = task_create(protocol, targeted("p", timeout_at=100), now=150)
    assert answer.status == 200
    stored = protocol.snap()["tasks"]
    assert [(t["state"], t["version"]) for t in stored] == [("acquired", 1)]


def test_it_returns_the_same_branch_promises_as_preload_when_acquiring(protocol):
    protocol("promise.create", create("wf", tags=BRANCH), now=0)
    protocol("promise.create", create("wf.1", tags={"resonate:branch": "wf"}), now=0)
    answer = task_create(protocol, create("wf", tags=BRANCH), now=1)
    assert [p["id"] for p in answer.data["preload"]] == ["wf.1"]


# T-02:49-50 — the task is acquired, suspended or halted: 409, nothing changes.


def make_acquired(protocol):
    protocol("promise.create", targeted("p"), now=0)
    acquire(protocol, "p", now=1)


def make_suspended(protocol):
    make_acquired(protocol)
    protocol("promise.create", create("a"), now=0)
    answer = protocol(
        "task.suspend",
        {"id": "p", "version": 1, "actions": [action("promise.register_callback", {"awaited": "a", "awaiter": "p"})]},
        now=2,
    )
    assert answer.status == 200


def make_halted(protocol):
    protocol("promise.create", targeted("p"), now=0)
    assert protocol("task.halt", {"id": "p"}, now=1).status == 200


@pytest.mark.parametrize("make", [make_acquired, make_suspended, make_halted], ids=["acquired", "suspended", "halted"])
def test_it_answers_409_when_the_task_is_held_suspended_or_halted(protocol, make):
    make(protocol)
    before = protocol.snap()
    assert task_create(protocol, targeted("p"), now=3).status == 409
    assert protocol.snap() == before


# T-02:51-52 (a targeted promise without a task) cannot be reached through POST /: every targeted promise
# is created with its task.


# Decision D3: a malformed request is a 400 and writes nothing.


@pytest.mark.parametrize(
    "data",
    [
        {"pid": "", "ttl": 1_000, "action": action("promise.create", create("p"))},
        {"pid": "w", "ttl": -1, "action": action("promise.create", create("p"))},
        {"pid": "w", "ttl": 1_000, "action": action("promise.create", {"id": "p"})},
        {
            "pid": "w",
            "ttl": 1_000,
            "action": action("promise.create", create("p", tags={"resonate:target": "nowhere"})),
        },
    ],
)
def test_it_answers_400_for_a_malformed_request(protocol, data):
    assert protocol("task.create", data, now=0).status == 400
    assert protocol.snap()["promises"] == []
