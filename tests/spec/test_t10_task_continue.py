"""T-10 task.continue: 404; 409 unless halted; then pending at the same version, with a retry and an execute."""

import pytest

from tests.conftest import action, create, execute, targeted


def start(protocol, id="w", now=0, ttl=1_000, timeout_at=10_000):
    protocol("promise.create", targeted(id, timeout_at), now=now)
    answer = protocol("task.acquire", {"id": id, "version": 0, "pid": "w", "ttl": ttl}, now=now)
    assert answer.status == 200


def resume(protocol, now, id="w"):
    return protocol("task.continue", {"id": id}, now=now)


# T-10:7-9


def test_it_answers_404_for_a_missing_task(protocol):
    assert resume(protocol, now=0).status == 404


# T-10:11 — only a halted task can continue.


def make_pending(protocol):
    protocol("promise.create", targeted("w"), now=0)


def make_acquired(protocol):
    start(protocol)


def make_suspended(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    protocol(
        "task.suspend",
        {"id": "w", "version": 1, "actions": [action("promise.register_callback", {"awaited": "a", "awaiter": "w"})]},
        now=1,
    )


def make_fulfilled(protocol):
    start(protocol)
    protocol("promise.settle", {"id": "w", "state": "resolved"}, now=1)


@pytest.mark.parametrize(
    "make",
    [make_pending, make_acquired, make_suspended, make_fulfilled],
    ids=["pending", "acquired", "suspended", "fulfilled"],
)
def test_it_answers_409_when_the_task_is_not_halted(protocol, make):
    make(protocol)
    before = protocol.snap()
    assert resume(protocol, now=2).status == 409
    assert protocol.snap() == before


# T-10:12-14 (a halted task without its promise) cannot be reached through POST /.


# T-10:16-20 — pending again, a retry timeout at now + retryTimeout, execute at the current version.


def test_it_continues_a_halted_task(protocol):
    start(protocol)
    protocol("task.halt", {"id": "w"}, now=1)
    answer = resume(protocol, now=100)
    assert answer.status == 200
    assert answer.data == {}
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "w", "state": "pending", "version": 1, "resumes": 0}]
    assert snap["taskTimeouts"] == [{"id": "w", "type": 0, "timeout": 5_100}]
    assert snap["messages"] == [execute("w", 1)]


def test_it_keeps_the_resumes_of_the_continued_task(protocol):
    protocol("promise.create", create("a"), now=0)
    start(protocol)
    protocol("task.halt", {"id": "w"}, now=1)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "w"}, now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)  # a halted task buffers the resume
    resume(protocol, now=3)
    assert protocol.snap()["tasks"] == [{"id": "w", "state": "pending", "version": 1, "resumes": 1}]


def test_a_continued_task_can_be_acquired_at_its_version(protocol):
    start(protocol)
    protocol("task.halt", {"id": "w"}, now=1)
    resume(protocol, now=2)
    answer = protocol("task.acquire", {"id": "w", "version": 1, "pid": "w2", "ttl": 1_000}, now=3)
    assert answer.status == 200
    assert answer.data["task"]["version"] == 2


def test_it_continues_without_checking_the_promise_deadline(protocol):
    # T-10 never looks at the promise's state or deadline.
    protocol("promise.create", targeted("w", timeout_at=100), now=0)
    protocol("task.halt", {"id": "w"}, now=1)
    assert resume(protocol, now=150).status == 200
    assert protocol.snap()["tasks"] == [{"id": "w", "state": "pending", "version": 0, "resumes": 0}]
