"""T-09 task.halt: 404; 409 if fulfilled; 200 unchanged if halted; else halted with no lease and no timeout."""

from tests.conftest import action, create, targeted


def start(protocol, id="w", now=0, ttl=1_000, timeout_at=10_000):
    protocol("promise.create", targeted(id, timeout_at), now=now)
    answer = protocol("task.acquire", {"id": id, "version": 0, "pid": "w", "ttl": ttl}, now=now)
    assert answer.status == 200


def halt(protocol, now, id="w"):
    return protocol("task.halt", {"id": id}, now=now)


# T-09:6-8


def test_it_answers_404_for_a_missing_task(protocol):
    assert halt(protocol, now=0).status == 404


def test_it_answers_404_for_a_promise_without_a_task(protocol):
    protocol("promise.create", create("w"), now=0)
    assert halt(protocol, now=1).status == 404


# T-09:10 — a fulfilled task cannot be halted.


def test_it_answers_409_when_the_task_is_fulfilled(protocol):
    start(protocol)
    protocol("promise.settle", {"id": "w", "state": "resolved"}, now=1)
    before = protocol.snap()
    assert halt(protocol, now=2).status == 409
    assert protocol.snap() == before


# T-09:11 — already halted: 200, nothing changes.


def test_it_answers_200_and_changes_nothing_when_already_halted(protocol):
    protocol("promise.create", targeted("w"), now=0)
    assert halt(protocol, now=1).status == 200
    before = protocol.snap()
    answer = halt(protocol, now=2)
    assert answer.status == 200
    assert answer.data == {}
    assert protocol.snap() == before


# T-09:12-14 — halted: no lease, no timeout.


def test_it_halts_a_pending_task_and_drops_its_retry_timeout(protocol):
    protocol("promise.create", targeted("w"), now=0)
    answer = halt(protocol, now=1)
    assert answer.status == 200
    assert answer.data == {}
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "w", "state": "halted", "version": 0, "resumes": 0}]
    assert snap["taskTimeouts"] == []
    assert snap["promiseTimeouts"] == [{"id": "w", "timeout": 10_000}]  # the promise still times out


def test_it_halts_an_acquired_task_and_drops_its_lease(protocol):
    start(protocol)
    halt(protocol, now=1)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "w", "state": "halted", "version": 1, "resumes": 0}]
    assert snap["taskTimeouts"] == []


def test_it_halts_a_suspended_task_and_keeps_its_callbacks(protocol):
    start(protocol)
    protocol("promise.create", create("a"), now=0)
    protocol(
        "task.suspend",
        {"id": "w", "version": 1, "actions": [action("promise.register_callback", {"awaited": "a", "awaiter": "w"})]},
        now=1,
    )
    halt(protocol, now=2)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "w", "state": "halted", "version": 1, "resumes": 0}]
    assert snap["callbacks"] == [{"awaiter": "w", "awaited": "a"}]


def test_it_keeps_the_resumes_of_the_halted_task(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("w"), now=0)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "w"}, now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    halt(protocol, now=3)
    assert protocol.snap()["tasks"] == [{"id": "w", "state": "halted", "version": 0, "resumes": 1}]


def test_a_halted_task_is_not_re_dispatched_by_timeouts(protocol):
    start(protocol, ttl=1_000)
    halt(protocol, now=1)
    protocol.tick(9_000)
    assert protocol.snap()["tasks"][0]["state"] == "halted"


def test_it_halts_without_checking_the_promise_deadline(protocol):
    # T-09 never looks at the promise: a task whose promise expired (not yet timed out) can be halted.
    protocol("promise.create", targeted("w", timeout_at=100), now=0)
    assert halt(protocol, now=150).status == 200
    assert protocol.snap()["tasks"] == [{"id": "w", "state": "halted", "version": 0, "resumes": 0}]
