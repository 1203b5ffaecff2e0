"""T-06 task.suspend: 404; 409 unless held; 422 awaited missing; 300 one settled; else callbacks + suspended."""

from tests.conftest import action, create, targeted


def start(protocol, id="w", now=0, ttl=1_000, timeout_at=10_000, tags=None):
    protocol("promise.create", targeted(id, timeout_at, tags), now=now)
    answer = protocol("task.acquire", {"id": id, "version": 0, "pid": "w", "ttl": ttl}, now=now)
    assert answer.status == 200


def suspend(protocol, awaited, now, id="w", version=1):
    actions = [action("promise.register_callback", {"awaited": a, "awaiter": id}) for a in awaited]
    return protocol("task.suspend", {"id": id, "version": version, "actions": actions}, now=now)


def give_a_resume(protocol, awaiter="w", now=1):
    """Record one resume on the awaiter's (non-suspended) task: register a callback, settle the awaited."""
    protocol("promise.create", create("r"), now=0)
    protocol("promise.register_callback", {"awaited": "r", "awaiter": awaiter}, now=now)
    protocol("promise.settle", {"id": "r", "state": "resolved"}, now=now)
    assert protocol("task.get", {"id": awaiter}, now=now).data["task"]["resumes"] == 1


# T-06:6-8


def test_it_answers_404_for_a_missing_task(protocol):
    protocol("promise.create", create("a"), now=0)
    assert suspend(protocol, ["a"], now=1).status == 404


# T-06:10-12 (a task without its promise) cannot be reached through POST /.


# T-06:14 — the task is not acquired.


def test_it_answers_409_when_the_task_is_pending(protocol):
    protocol("promise.create", targeted("w"), now=0)
    protocol("promise.create", create("a"), now=0)
    before = protocol.snap()
    assert suspend(protocol, ["a"], now=1, version=0).status == 409
    assert protocol.snap() == before


def test_it_answers_409_when_the_task_is_already_suspended(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    assert suspend(protocol, ["a"], now=1).status == 200
    assert suspend(protocol, ["a"], now=2).status == 409


# T-06:15 — the task's promise is past its deadline.


def test_it_answers_409_when_the_task_promise_has_expired(protocol):
    start(protocol, timeout_at=100)
    protocol("promise.create", create("a"), now=0)
    before = protocol.snap()
    assert suspend(protocol, ["a"], now=100).status == 409
    assert protocol.snap() == before


# T-06:16 — the version is stale.


def test_it_answers_409_when_the_version_is_stale(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    before = protocol.snap()
    assert suspend(protocol, ["a"], now=1, version=0).status == 409
    assert protocol.snap() == before


# T-06:18-21 — an awaited promise is missing: 422, even when another awaited promise is settled.


def test_it_answers_422_when_an_awaited_promise_is_missing(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    before = protocol.snap()
    assert suspend(protocol, ["a", "missing"], now=1).status == 422
    assert protocol.snap() == before


def test_it_answers_422_for_a_missing_promise_even_after_a_settled_one(protocol):
    start(protocol)
    protocol("promise.create", create("done"), now=0)
    protocol("promise.settle", {"id": "done", "state": "resolved"}, now=0)
    assert suspend(protocol, ["done", "missing"], now=1).status == 422
    assert protocol.snap()["tasks"][0]["state"] == "acquired"


# T-06:23-27 — an awaited promise is settled or expired: 300, the task keeps running (resumes cleared).


def test_it_answers_300_when_an_awaited_promise_is_settled(protocol):
    start(protocol, ttl=1_000)
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", create("b"), now=0)
    protocol("promise.settle", {"id": "b", "state": "resolved"}, now=1)
    answer = suspend(protocol, ["a", "b"], now=2)
    assert answer.status == 300
    assert answer.data == {"preload": []}
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "w", "state": "acquired", "version": 1, "resumes": 0, "ttl": 1_000, "pid": "w"}]
    assert snap["taskTimeouts"] == [{"id": "w", "type": 1, "timeout": 1_000}]  # the lease is untouched
    assert snap["callbacks"] == []  # not even for the pending one


def test_it_answers_300_when_an_awaited_promise_has_expired(protocol):
    start(protocol)
    protocol("promise.create", create("a", timeout_at=50), now=0)
    answer = suspend(protocol, ["a"], now=50)
    assert answer.status == 300
    assert protocol.snap()["callbacks"] == []
    assert protocol.snap()["promises"][0]["state"] == "pending"  # the projection is not written


def test_it_clears_the_resumes_on_a_300(protocol):
    start(protocol)
    give_a_resume(protocol)
    protocol("promise.create", create("done"), now=0)
    protocol("promise.settle", {"id": "done", "state": "resolved"}, now=2)
    assert suspend(protocol, ["done"], now=3).status == 300
    assert protocol("task.get", {"id": "w"}, now=4).data["task"]["resumes"] == 0


def test_it_returns_the_same_branch_promises_as_preload_on_a_300(protocol):
    # Decision D6.
    start(protocol, tags={"resonate:branch": "w"})
    protocol("promise.create", create("w.1", tags={"resonate:branch": "w"}), now=0)
    settled = protocol("promise.settle", {"id": "w.1", "state": "resolved"}, now=1)
    answer = suspend(protocol, ["w.1"], now=2)
    assert answer.status == 300
    assert answer.data == {"preload": [settled.data["promise"]]}


# T-06:28-37 — every awaited promise is live: callbacks registered, the task suspended without a lease.


def test_it_suspends_the_task_on_live_awaited_promises(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("b"), now=0)
    answer = suspend(protocol, ["a", "b"], now=5)
    assert answer.status == 200
    assert answer.data == {}
    snap = protocol.snap()
    assert snap["callbacks"] == [{"awaiter": "w", "awaited": "a"}, {"awaiter": "w", "awaited": "b"}]
    suspended = {"id": "w", "state": "suspended", "version": 1, "resumes": 0}
    assert [t for t in snap["tasks"] if t["id"] == "w"] == [suspended]
    assert [t for t in snap["taskTimeouts"] if t["id"] == "w"] == []


def test_it_clears_the_resumes_when_suspending(protocol):
    start(protocol)
    give_a_resume(protocol)
    protocol("promise.create", create("a"), now=0)
    assert suspend(protocol, ["a"], now=3).status == 200
    assert protocol("task.get", {"id": "w"}, now=4).data["task"]["resumes"] == 0


def test_it_registers_a_callback_once_for_a_promise_awaited_twice(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    assert suspend(protocol, ["a", "a"], now=1).status == 200
    assert protocol.snap()["callbacks"] == [{"awaiter": "w", "awaited": "a"}]


def test_it_suspends_with_no_callbacks_for_an_empty_list(protocol):
    # T-06 accepts an empty actions list (the reference server's 400 is not adopted).
    start(protocol)
    answer = protocol("task.suspend", {"id": "w", "version": 1, "actions": []}, now=1)
    assert answer.status == 200
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "w", "state": "suspended", "version": 1, "resumes": 0}]
    assert snap["callbacks"] == [] and snap["taskTimeouts"] == []


def test_a_suspended_task_is_not_dispatched_by_its_old_lease(protocol):
    start(protocol, ttl=1_000)
    protocol("promise.create", create("a"), now=0)
    suspend(protocol, ["a"], now=1)
    protocol.tick(5_000)
    assert protocol("task.get", {"id": "w"}, now=5_000).data["task"]["state"] == "suspended"
