"""00-resume enqueueResume: suspended → pending, retry, execute; pending/acquired/halted buffer it; fulfilled: no-op."""

from tests.conftest import action, create, execute, targeted


def start(protocol, id, now=0, ttl=60_000, timeout_at=10_000):
    """The promise `id` with its task acquired by pid "w" at version 1."""
    protocol("promise.create", targeted(id, timeout_at), now=now)
    answer = protocol("task.acquire", {"id": id, "version": 0, "pid": "w", "ttl": ttl}, now=now)
    assert answer.status == 200


def suspend(protocol, id, awaited, now, version=1):
    actions = [action("promise.register_callback", {"awaited": a, "awaiter": id}) for a in awaited]
    answer = protocol("task.suspend", {"id": id, "version": version, "actions": actions}, now=now)
    assert answer.status == 200


def task(protocol, id):
    [record] = [t for t in protocol.snap()["tasks"] if t["id"] == id]
    return record


def timeouts(protocol, id):
    return [(t["type"], t["timeout"]) for t in protocol.snap()["taskTimeouts"] if t["id"] == id]


def messages_for(protocol, id):
    return [m for m in protocol.snap()["messages"] if m["message"]["data"].get("task", {}).get("id") == id]


# 00-resume:17 (an awaiter without a task) cannot be reached through POST /: promise.register_callback
# requires an awaiter with a target (so with a task), and task.suspend requires the task.


# 00-resume:19-29 — a suspended awaiter goes pending, with a retry timeout and an execute to its target.


def test_settling_an_awaited_promise_resumes_a_suspended_awaiter(protocol):
    protocol("promise.create", create("a"), now=0)
    start(protocol, "w")
    suspend(protocol, "w", ["a"], now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=100)
    assert task(protocol, "w") == {"id": "w", "state": "pending", "version": 1, "resumes": 1}
    assert timeouts(protocol, "w") == [(0, 5_100)]
    assert messages_for(protocol, "w") == [execute("w", 1)]


def test_a_resume_re_sends_the_current_version_without_bumping_it(protocol):
    protocol("promise.create", create("a"), now=0)
    start(protocol, "w", ttl=100)
    protocol.tick(100)  # lease lapses, pending at version 1
    assert protocol("task.acquire", {"id": "w", "version": 1, "pid": "w2", "ttl": 60_000}, now=200).status == 200
    suspend(protocol, "w", ["a"], now=201, version=2)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=300)
    assert task(protocol, "w") == {"id": "w", "state": "pending", "version": 2, "resumes": 1}
    assert messages_for(protocol, "w") == [execute("w", 2)]


def test_it_sends_the_execute_to_the_awaiters_own_target(protocol):
    address = "poll://any@workers"
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", create("w", tags={"resonate:target": address}), now=0)
    protocol("task.acquire", {"id": "w", "version": 0, "pid": "w", "ttl": 60_000}, now=0)
    suspend(protocol, "w", ["a"], now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    assert messages_for(protocol, "w") == [execute("w", 1, address)]


def test_a_timed_out_awaited_promise_resumes_a_suspended_awaiter(protocol):
    protocol("promise.create", create("t", timeout_at=500, tags={"resonate:timer": "true"}), now=0)
    start(protocol, "w")
    suspend(protocol, "w", ["t"], now=1)
    protocol.tick(700)
    assert task(protocol, "w") == {"id": "w", "state": "pending", "version": 1, "resumes": 1}
    assert timeouts(protocol, "w") == [(0, 5_700)]  # now is the tick time
    assert messages_for(protocol, "w") == [execute("w", 1)]


def test_fulfilling_an_awaited_task_resumes_its_suspended_awaiter(protocol):
    start(protocol, "child")
    start(protocol, "parent")
    suspend(protocol, "parent", ["child"], now=1)
    fulfilled = protocol(
        "task.fulfill",
        {"id": "child", "version": 1, "action": action("promise.settle", {"id": "child", "state": "resolved"})},
        now=50,
    )
    assert fulfilled.status == 200
    assert task(protocol, "parent") == {"id": "parent", "state": "pending", "version": 1, "resumes": 1}
    assert messages_for(protocol, "parent") == [execute("parent", 1)]


def test_a_fenced_settle_resumes_a_suspended_awaiter(protocol):
    protocol("promise.create", create("a"), now=0)
    start(protocol, "w")
    start(protocol, "other")
    suspend(protocol, "w", ["a"], now=1)
    fenced = protocol(
        "task.fence",
        {"id": "other", "version": 1, "action": action("promise.settle", {"id": "a", "state": "resolved"})},
        now=2,
    )
    assert fenced.data["action"]["head"]["status"] == 200
    assert task(protocol, "w")["state"] == "pending"


def test_it_resumes_an_awaiter_whose_own_deadline_has_passed(protocol):
    # 00-resume has no awaiter-deadline guard: only the awaiter's task state matters.
    protocol("promise.create", create("a", timeout_at=10_000), now=0)
    start(protocol, "w", timeout_at=500)
    suspend(protocol, "w", ["a"], now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=600)
    assert task(protocol, "w") == {"id": "w", "state": "pending", "version": 1, "resumes": 1}
    assert messages_for(protocol, "w") == [execute("w", 1)]


def test_only_the_first_settled_promise_wakes_a_task_and_later_ones_are_buffered(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", create("b"), now=0)
    start(protocol, "w")
    suspend(protocol, "w", ["a", "b"], now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=10)
    protocol("promise.settle", {"id": "b", "state": "resolved"}, now=20)
    assert task(protocol, "w") == {"id": "w", "state": "pending", "version": 1, "resumes": 2}
    assert timeouts(protocol, "w") == [(0, 5_010)]  # armed by the first resume only


# 00-resume:27-29 — an awaiter without a target changes state but is sent nothing.


def test_it_resumes_an_awaiter_without_target_without_sending_anything(protocol):
    protocol("promise.create", create("a"), now=0)
    created = protocol(
        "task.create", {"pid": "w", "ttl": 60_000, "action": action("promise.create", create("w"))}, now=0
    )
    assert created.status == 200 and created.data["task"]["state"] == "acquired"
    suspend(protocol, "w", ["a"], now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    assert task(protocol, "w") == {"id": "w", "state": "pending", "version": 1, "resumes": 1}
    assert timeouts(protocol, "w") == [(0, 5_002)]
    assert protocol.snap()["messages"] == []


# 00-resume:30-34 — a pending, acquired or halted awaiter only buffers the resume; no message, same state.


def test_a_pending_awaiter_buffers_the_resume(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("w"), now=0)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "w"}, now=1)
    before = protocol.snap()
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    assert task(protocol, "w") == {"id": "w", "state": "pending", "version": 0, "resumes": 1}
    assert timeouts(protocol, "w") == [(0, 5_000)]  # unchanged
    assert protocol.snap()["messages"] == before["messages"]


def test_an_acquired_awaiter_buffers_the_resume(protocol):
    protocol("promise.create", create("a"), now=0)
    start(protocol, "w", ttl=60_000)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "w"}, now=1)
    before = protocol.snap()
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    acquired = {"id": "w", "state": "acquired", "version": 1, "resumes": 1, "ttl": 60_000, "pid": "w"}
    assert task(protocol, "w") == acquired
    assert timeouts(protocol, "w") == [(1, 60_000)]  # the lease is untouched
    assert protocol.snap()["messages"] == before["messages"]


def test_a_halted_awaiter_buffers_the_resume_and_stays_halted(protocol):
    protocol("promise.create", create("a"), now=0)
    start(protocol, "w")
    suspend(protocol, "w", ["a"], now=1)
    protocol("task.halt", {"id": "w"}, now=2)
    before = protocol.snap()
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=3)
    assert task(protocol, "w") == {"id": "w", "state": "halted", "version": 1, "resumes": 1}
    assert timeouts(protocol, "w") == []
    assert protocol.snap()["messages"] == before["messages"]


def test_buffered_resumes_count_each_settled_promise(protocol):
    for id in ("a", "b"):
        protocol("promise.create", create(id), now=0)
    protocol("promise.create", targeted("w"), now=0)
    for id in ("a", "b"):
        protocol("promise.register_callback", {"awaited": id, "awaiter": "w"}, now=1)
        protocol("promise.settle", {"id": id, "state": "resolved"}, now=2)
    assert task(protocol, "w")["resumes"] == 2


# 00-resume:31-32 (a resume already buffered for the same awaited promise) cannot be reached through
# POST /: a promise settles once, and its callbacks are cleared when it does.


# 00-resume:35-36 — a fulfilled awaiter is not woken. (Its registrations are also scrubbed when its promise
# settles, P-03:23-29, so the two together are observed here.)


def test_a_fulfilled_awaiter_is_not_woken(protocol):
    protocol("promise.create", create("a"), now=0)
    start(protocol, "w")
    suspend(protocol, "w", ["a"], now=1)
    protocol("promise.settle", {"id": "w", "state": "rejected_canceled"}, now=2)
    before = protocol.snap()
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=3)
    assert task(protocol, "w") == {"id": "w", "state": "fulfilled", "version": 1, "resumes": 0}
    assert timeouts(protocol, "w") == []
    assert protocol.snap()["messages"] == before["messages"]
