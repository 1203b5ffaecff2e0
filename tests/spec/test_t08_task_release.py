"""T-08 task.release: 404; 409 unless acquired, live and current; then pending at the same version, re-sent."""

from tests.conftest import action, create, execute, targeted


def start(protocol, id="w", now=0, ttl=1_000, timeout_at=10_000):
    protocol("promise.create", targeted(id, timeout_at), now=now)
    answer = protocol("task.acquire", {"id": id, "version": 0, "pid": "w", "ttl": ttl}, now=now)
    assert answer.status == 200


def release(protocol, now, id="w", version=1):
    return protocol("task.release", {"id": id, "version": version}, now=now)


# T-08:7-9


def test_it_answers_404_for_a_missing_task(protocol):
    assert release(protocol, now=0).status == 404


# T-08:11-13 (a task without its promise) cannot be reached through POST /.


# T-08:15 — the task is not acquired.


def test_it_answers_409_when_the_task_is_pending(protocol):
    protocol("promise.create", targeted("w"), now=0)
    before = protocol.snap()
    assert release(protocol, now=1, version=0).status == 409
    assert protocol.snap() == before


def test_it_answers_409_when_the_task_is_suspended(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    protocol(
        "task.suspend",
        {"id": "w", "version": 1, "actions": [action("promise.register_callback", {"awaited": "a", "awaiter": "w"})]},
        now=1,
    )
    assert release(protocol, now=2).status == 409
    assert protocol.snap()["tasks"][0]["state"] == "suspended"


# T-08:16 — the task's promise is past its deadline.


def test_it_answers_409_when_the_task_promise_has_expired(protocol):
    start(protocol, timeout_at=100)
    before = protocol.snap()
    assert release(protocol, now=100).status == 409
    assert protocol.snap() == before


# T-08:17 — the version is stale.


def test_it_answers_409_when_the_version_is_stale(protocol):
    start(protocol)
    before = protocol.snap()
    assert release(protocol, now=1, version=0).status == 409
    assert release(protocol, now=1, version=2).status == 409
    assert protocol.snap() == before


# T-08:18-23 — pending again at the same version, a retry timeout, execute re-sent.


def test_it_returns_the_task_to_pending_and_re_dispatches_it(protocol):
    start(protocol, ttl=60_000)
    answer = release(protocol, now=100)
    assert answer.status == 200
    assert answer.data == {}
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "w", "state": "pending", "version": 1, "resumes": 0}]
    assert snap["taskTimeouts"] == [{"id": "w", "type": 0, "timeout": 5_100}]
    assert snap["messages"] == [execute("w", 1)]
    assert snap["promises"][0]["state"] == "pending"


def test_it_keeps_the_resumes_of_the_released_task(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "w"}, now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    release(protocol, now=3)
    task = protocol("task.get", {"id": "w"}, now=4).data["task"]
    assert task == {"id": "w", "state": "pending", "version": 1, "resumes": 1}


def test_a_released_task_can_be_acquired_again_at_the_next_version(protocol):
    start(protocol)
    release(protocol, now=1)
    answer = protocol("task.acquire", {"id": "w", "version": 1, "pid": "w2", "ttl": 1_000}, now=2)
    assert answer.status == 200
    assert answer.data["task"]["version"] == 2
