"""T-01 task.get: 404 without a task; the stored task while its promise is live, else projected as fulfilled."""

from tests.conftest import action, create, targeted


def get(protocol, id, now):
    return protocol("task.get", {"id": id}, now=now).data


def acquire(protocol, id, now, version=0, pid="w", ttl=1_000):
    answer = protocol("task.acquire", {"id": id, "version": version, "pid": pid, "ttl": ttl}, now=now)
    assert answer.status == 200
    return answer


# T-01:6-8


def test_it_answers_404_for_a_missing_task(protocol):
    assert protocol("task.get", {"id": "nope"}, now=0).status == 404


def test_it_answers_404_for_a_promise_that_has_no_task(protocol):
    protocol("promise.create", create("p"), now=0)
    assert protocol("task.get", {"id": "p"}, now=1).status == 404


# T-01:10-12 (a task whose promise is missing) cannot be reached through POST /: a task is only ever
# created together with its promise, and promises are never deleted.


# T-01:14-15 — the promise is live: the task as stored.


def test_it_returns_a_pending_task_as_stored(protocol):
    protocol("promise.create", targeted("p"), now=0)
    answer = protocol("task.get", {"id": "p"}, now=1)
    assert answer.status == 200
    assert answer.data == {"task": {"id": "p", "state": "pending", "version": 0, "resumes": 0}}


def test_it_returns_an_acquired_task_with_its_lease(protocol):
    protocol("promise.create", targeted("p"), now=0)
    acquire(protocol, "p", now=1, pid="w-7", ttl=60_000)
    acquired = {"id": "p", "state": "acquired", "version": 1, "resumes": 0, "ttl": 60_000, "pid": "w-7"}
    assert get(protocol, "p", now=2) == {"task": acquired}


def test_it_returns_a_suspended_task_with_its_resume_count(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("w"), now=0)
    acquire(protocol, "w", now=1)
    suspended = protocol(
        "task.suspend",
        {"id": "w", "version": 1, "actions": [action("promise.register_callback", {"awaited": "a", "awaiter": "w"})]},
        now=2,
    )
    assert suspended.status == 200
    assert get(protocol, "w", now=3) == {"task": {"id": "w", "state": "suspended", "version": 1, "resumes": 0}}
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=4)
    assert get(protocol, "w", now=5) == {"task": {"id": "w", "state": "pending", "version": 1, "resumes": 1}}


def test_it_returns_a_live_task_one_millisecond_before_the_deadline(protocol):
    protocol("promise.create", targeted("p", timeout_at=100), now=0)
    acquire(protocol, "p", now=1)
    assert protocol("task.get", {"id": "p"}, now=99).data["task"]["state"] == "acquired"


# T-01:16-17 — the promise is settled or expired: the task reads as fulfilled.


def test_it_projects_the_task_of_an_expired_promise_as_fulfilled_without_writing(protocol):
    protocol("promise.create", targeted("p", timeout_at=100), now=0)
    acquire(protocol, "p", now=1, pid="w-7", ttl=60_000)
    answer = protocol("task.get", {"id": "p"}, now=100)
    assert answer.status == 200
    assert answer.data == {"task": {"id": "p", "state": "fulfilled", "version": 1, "resumes": 0}}
    assert protocol.snap()["tasks"] == [
        {"id": "p", "state": "acquired", "version": 1, "resumes": 0, "ttl": 60_000, "pid": "w-7"}
    ]


def test_it_projects_away_the_resumes_of_the_task_of_an_expired_promise(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("w", timeout_at=100), now=0)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "w"}, now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    assert protocol("task.get", {"id": "w"}, now=3).data["task"]["resumes"] == 1
    assert get(protocol, "w", now=100) == {"task": {"id": "w", "state": "fulfilled", "version": 0, "resumes": 0}}


def test_it_returns_the_fulfilled_task_of_a_settled_promise(protocol):
    protocol("promise.create", targeted("p"), now=0)
    acquire(protocol, "p", now=1)
    protocol("promise.settle", {"id": "p", "state": "resolved"}, now=2)
    assert get(protocol, "p", now=3) == {"task": {"id": "p", "state": "fulfilled", "version": 1, "resumes": 0}}


def test_it_returns_the_task_born_fulfilled_with_an_expired_promise(protocol):
    protocol("promise.create", targeted("p", timeout_at=5), now=10)
    assert get(protocol, "p", now=11) == {"task": {"id": "p", "state": "fulfilled", "version": 0, "resumes": 0}}
