"""P-04 promise.register_callback: 404, 422 (awaiter, target); registered only if both live; awaited projected."""

from tests.conftest import create, targeted

TIMER = {"resonate:timer": "true"}


def register(protocol, awaited, awaiter, now):
    return protocol("promise.register_callback", {"awaited": awaited, "awaiter": awaiter}, now=now)


# P-04:6-8


def test_it_answers_404_when_the_awaited_promise_is_missing(protocol):
    protocol("promise.create", targeted("w"), now=0)
    assert register(protocol, "nope", "w", now=1).status == 404
    assert protocol.snap()["callbacks"] == []


def test_it_answers_404_when_both_promises_are_missing(protocol):
    assert register(protocol, "nope", "nobody", now=1).status == 404  # the awaited is looked up first


# P-04:10-12


def test_it_answers_422_when_the_awaiter_promise_is_missing(protocol):
    protocol("promise.create", create("a"), now=0)
    assert register(protocol, "a", "nobody", now=1).status == 422
    assert protocol.snap()["callbacks"] == []


# P-04:14


def test_it_answers_422_when_the_awaiter_has_no_target(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", create("w", tags=TIMER), now=0)
    assert register(protocol, "a", "w", now=1).status == 422
    assert protocol.snap()["callbacks"] == []


def test_it_answers_422_for_an_awaiter_without_target_even_when_the_awaited_is_settled(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=1)
    protocol("promise.create", create("w"), now=0)
    assert register(protocol, "a", "w", now=2).status == 422


# P-04:15-19 — both live: the callback is added (once), the awaited is returned as stored.


def test_it_registers_the_callback_when_both_promises_are_live(protocol):
    created = protocol("promise.create", create("a", param={"data": "eA=="}), now=0)
    protocol("promise.create", targeted("w"), now=0)
    answer = register(protocol, "a", "w", now=5)
    assert answer.status == 200
    assert answer.data == created.data
    assert protocol.snap()["callbacks"] == [{"awaiter": "w", "awaited": "a"}]


def test_it_registers_a_callback_only_once(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("w"), now=0)
    register(protocol, "a", "w", now=5)
    assert register(protocol, "a", "w", now=6).status == 200
    assert protocol.snap()["callbacks"] == [{"awaiter": "w", "awaited": "a"}]


def test_a_registered_callback_resumes_the_awaiter_when_the_awaited_settles(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("w"), now=0)
    register(protocol, "a", "w", now=5)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=10)
    # The awaiter's task is pending (created by promise.create), so the resume is buffered (00-resume:30-34).
    assert protocol("task.get", {"id": "w"}, now=10).data["task"]["resumes"] == 1


# P-04:17 — the awaited is live but the awaiter is not: nothing is registered, the awaited still reads pending.


def test_it_skips_the_registration_when_the_awaiter_is_settled(protocol):
    protocol("promise.create", create("a"), now=0)
    protocol("promise.create", targeted("w"), now=0)
    protocol("promise.settle", {"id": "w", "state": "resolved"}, now=1)
    answer = register(protocol, "a", "w", now=5)
    assert answer.status == 200
    assert answer.data["promise"]["state"] == "pending"
    assert protocol.snap()["callbacks"] == []


def test_it_skips_the_registration_when_the_awaiter_has_expired(protocol):
    protocol("promise.create", create("a", timeout_at=10_000), now=0)
    protocol("promise.create", targeted("w", timeout_at=100), now=0)
    answer = register(protocol, "a", "w", now=100)
    assert answer.status == 200
    assert answer.data["promise"]["state"] == "pending"
    assert protocol.snap()["callbacks"] == []


# P-04:20-26 — the awaited is pending but expired: answered projected, nothing registered.


def test_it_answers_an_expired_awaited_as_timed_out_without_registering(protocol):
    protocol("promise.create", create("a", timeout_at=100), now=0)
    protocol("promise.create", targeted("w", timeout_at=10_000), now=0)
    answer = register(protocol, "a", "w", now=100)
    assert answer.status == 200
    assert answer.data == {
        "promise": {
            "id": "a",
            "state": "rejected_timedout",
            "param": {},
            "value": {},
            "tags": {},
            "timeoutAt": 100,
            "createdAt": 0,
            "settledAt": 100,
        }
    }
    snap = protocol.snap()
    assert snap["callbacks"] == []
    assert snap["promises"][0]["state"] == "pending"


def test_it_answers_an_expired_timer_as_resolved_without_registering(protocol):
    protocol("promise.create", create("a", timeout_at=100, tags=TIMER), now=0)
    protocol("promise.create", targeted("w", timeout_at=10_000), now=0)
    answer = register(protocol, "a", "w", now=150)
    assert answer.data["promise"]["state"] == "resolved"
    assert answer.data["promise"]["settledAt"] == 100
    assert protocol.snap()["callbacks"] == []


# P-04:27-28 — the awaited is settled: answered as stored, nothing registered and nothing resumed.


def test_it_answers_a_settled_awaited_as_stored_and_writes_nothing(protocol):
    protocol("promise.create", create("a"), now=0)
    settled = protocol("promise.settle", {"id": "a", "state": "rejected", "value": {"data": "eA=="}}, now=1)
    protocol("promise.create", targeted("w"), now=0)
    before = protocol.snap()
    answer = register(protocol, "a", "w", now=5)
    assert answer.status == 200
    assert answer.data == settled.data
    assert protocol.snap() == before  # unlike the reference server, no resume is recorded
