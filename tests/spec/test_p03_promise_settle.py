"""P-03 promise.settle: 404; a live promise settles with its cascade; expired → projected; settled → as stored."""

import pytest

from tests.conftest import action, create, execute, targeted

TIMER = {"resonate:timer": "true"}


def start(protocol, id, now=0, ttl=1_000, timeout_at=10_000):
    """The promise `id` with a task, acquired by pid "w" at version 1 (promise.create, then task.acquire)."""
    protocol("promise.create", targeted(id, timeout_at), now=now)
    answer = protocol("task.acquire", {"id": id, "version": 0, "pid": "w", "ttl": ttl}, now=now)
    assert answer.status == 200 and answer.data["task"]["version"] == 1
    return answer


def suspend(protocol, id, awaited, now, version=1):
    actions = [action("promise.register_callback", {"awaited": awaited, "awaiter": id})]
    answer = protocol("task.suspend", {"id": id, "version": version, "actions": actions}, now=now)
    assert answer.status == 200
    return answer


# P-03:6-8


def test_it_answers_404_for_a_missing_promise(protocol):
    answer = protocol("promise.settle", {"id": "nope", "state": "resolved"}, now=0)
    assert answer.status == 404
    assert protocol.snap()["promises"] == []


# P-03:11-15 — a live promise takes the requested state and value, settled now.


@pytest.mark.parametrize("state", ["resolved", "rejected", "rejected_canceled"])
def test_it_settles_a_live_promise_with_the_requested_state_and_value(protocol, state):
    protocol("promise.create", create("p", timeout_at=10_000, param={"data": "cA=="}), now=0)
    answer = protocol("promise.settle", {"id": "p", "state": state, "value": {"data": "dg=="}}, now=40)
    expected = {
        "id": "p",
        "state": state,
        "param": {"data": "cA=="},
        "value": {"data": "dg=="},
        "tags": {},
        "timeoutAt": 10_000,
        "createdAt": 0,
        "settledAt": 40,
    }
    assert answer.status == 200
    assert answer.data == {"promise": expected}
    assert protocol.snap()["promises"] == [expected]


def test_it_stores_value_headers(protocol):
    protocol("promise.create", create("p"), now=0)
    value = {"headers": {"h": "1"}, "data": "dg=="}
    answer = protocol("promise.settle", {"id": "p", "state": "resolved", "value": value}, now=1)
    assert answer.data["promise"]["value"] == value


def test_it_settles_with_an_empty_value_when_none_is_given(protocol):
    protocol("promise.create", create("p"), now=0)
    answer = protocol("promise.settle", {"id": "p", "state": "resolved"}, now=1)
    assert answer.data["promise"]["value"] == {}


def test_it_settles_a_promise_one_millisecond_before_its_deadline(protocol):
    protocol("promise.create", create("p", timeout_at=100), now=0)
    answer = protocol("promise.settle", {"id": "p", "state": "resolved"}, now=99)
    assert answer.data["promise"]["state"] == "resolved"
    assert answer.data["promise"]["settledAt"] == 99


# P-03:16 — the promise timeout is disarmed.


def test_it_disarms_the_promise_timeout(protocol):
    protocol("promise.create", create("t", timeout_at=10_000, tags=TIMER), now=0)
    protocol("promise.settle", {"id": "t", "state": "rejected"}, now=1)
    assert protocol.snap()["promiseTimeouts"] == []
    protocol.tick(10_000)
    assert protocol.snap()["promises"][0]["state"] == "rejected"


# P-03:17-20 — the promise's task is fulfilled: no lease, no resumes, no task timeout.


def test_it_fulfils_the_task_of_the_promise_and_drops_its_lease(protocol):
    start(protocol, "p", now=0)
    protocol("promise.settle", {"id": "p", "state": "resolved"}, now=10)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "p", "state": "fulfilled", "version": 1, "resumes": 0}]
    assert snap["taskTimeouts"] == []
    assert snap["promiseTimeouts"] == []


def test_it_fulfils_a_pending_task_and_drops_its_retry_timeout(protocol):
    protocol("promise.create", targeted("p"), now=0)
    protocol("promise.settle", {"id": "p", "state": "resolved"}, now=10)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "p", "state": "fulfilled", "version": 0, "resumes": 0}]
    assert snap["taskTimeouts"] == []


# P-03:21-22 — without a task, only the promise changes.


def test_it_settles_a_promise_without_a_task_without_creating_one(protocol):
    protocol("promise.create", create("p"), now=0)
    protocol("promise.settle", {"id": "p", "state": "resolved"}, now=10)
    snap = protocol.snap()
    assert snap["tasks"] == [] and snap["taskTimeouts"] == [] and snap["messages"] == []


# P-03:23-29 — the settlement scrub: the settled promise can never be resumed, its registrations go.


def test_it_scrubs_the_callbacks_the_settled_promise_registered_as_an_awaiter(protocol):
    protocol("promise.create", create("a"), now=0)
    start(protocol, "w", now=0)
    suspend(protocol, "w", "a", now=1)
    assert protocol.snap()["callbacks"] == [{"awaiter": "w", "awaited": "a"}]
    protocol("promise.settle", {"id": "w", "state": "resolved"}, now=2)
    assert protocol.snap()["callbacks"] == []
    # Settling the awaited promise now resumes nobody: the awaiter's task stays fulfilled, nothing is sent
    # (the only message is the execute that promise.create sent at version 0).
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=3)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "w", "state": "fulfilled", "version": 1, "resumes": 0}]
    assert snap["messages"] == [execute("w", 0)]


# P-03:30-31 — every listener gets an unblock carrying the settled record; listeners are cleared.


def test_it_sends_an_unblock_with_the_settled_record_to_every_listener(protocol):
    protocol("promise.create", create("p"), now=0)
    for address in ("poll://uni@g/w2", "poll://uni@g/w1"):
        protocol("promise.register_listener", {"awaited": "p", "address": address}, now=1)
    answer = protocol("promise.settle", {"id": "p", "state": "resolved", "value": {"data": "eA=="}}, now=5)
    record = answer.data["promise"]
    snap = protocol.snap()
    assert snap["listeners"] == []
    assert snap["messages"] == [
        {"address": "poll://uni@g/w1", "message": {"kind": "unblock", "head": {}, "data": {"promise": record}}},
        {"address": "poll://uni@g/w2", "message": {"kind": "unblock", "head": {}, "data": {"promise": record}}},
    ]


# P-03:32-33 — every callback's awaiter is resumed (enqueueResume); callbacks are cleared.


def test_it_resumes_a_suspended_awaiter(protocol):
    protocol("promise.create", create("a"), now=0)
    start(protocol, "w", now=0)
    suspend(protocol, "w", "a", now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=100)
    snap = protocol.snap()
    assert snap["callbacks"] == []
    assert snap["tasks"] == [{"id": "w", "state": "pending", "version": 1, "resumes": 1}]
    assert snap["taskTimeouts"] == [{"id": "w", "type": 0, "timeout": 5_100}]
    assert snap["messages"] == [execute("w", 1)]


def test_it_resumes_every_awaiter_of_the_promise(protocol):
    protocol("promise.create", create("a"), now=0)
    for id in ("w1", "w2"):
        start(protocol, id, now=0)
        suspend(protocol, id, "a", now=1)
    protocol("promise.settle", {"id": "a", "state": "rejected"}, now=100)
    snap = protocol.snap()
    assert [t["state"] for t in snap["tasks"]] == ["pending", "pending"]
    assert snap["messages"] == [execute("w1", 1), execute("w2", 1)]


# P-03:35-41 — pending but past its deadline: answered projected, nothing written, nothing sent.


def test_it_answers_an_expired_promise_as_timed_out_and_writes_nothing(protocol):
    protocol("promise.create", create("p", timeout_at=100), now=0)
    protocol("promise.register_listener", {"awaited": "p", "address": "poll://uni@g/w1"}, now=1)
    before = protocol.snap()
    answer = protocol("promise.settle", {"id": "p", "state": "resolved", "value": {"data": "eA=="}}, now=100)
    assert answer.status == 200
    assert answer.data == {
        "promise": {
            "id": "p",
            "state": "rejected_timedout",
            "param": {},
            "value": {},
            "tags": {},
            "timeoutAt": 100,
            "createdAt": 0,
            "settledAt": 100,
        }
    }
    assert protocol.snap() == before


def test_it_answers_an_expired_timer_as_resolved_and_writes_nothing(protocol):
    protocol("promise.create", create("t", timeout_at=100, tags=TIMER), now=0)
    before = protocol.snap()
    answer = protocol("promise.settle", {"id": "t", "state": "rejected"}, now=200)
    assert answer.data["promise"]["state"] == "resolved"
    assert answer.data["promise"]["settledAt"] == 100
    assert protocol.snap() == before


def test_it_does_not_fulfil_the_task_of_an_expired_promise(protocol):
    start(protocol, "p", now=0, timeout_at=100)
    before = protocol.snap()
    protocol("promise.settle", {"id": "p", "state": "resolved"}, now=150)
    assert protocol.snap() == before  # only onPromiseTimeout writes an expired promise's settlement


# P-03:42-43 — already settled: answered as stored, the request's state and value are discarded.


def test_it_returns_an_already_settled_promise_unchanged(protocol):
    protocol("promise.create", create("p"), now=0)
    first = protocol("promise.settle", {"id": "p", "state": "resolved", "value": {"data": "MQ=="}}, now=10)
    before = protocol.snap()
    again = protocol("promise.settle", {"id": "p", "state": "rejected", "value": {"data": "Mg=="}}, now=20)
    assert again.status == 200
    assert again.data == first.data
    assert protocol.snap() == before


def test_it_returns_a_promise_born_timed_out_unchanged(protocol):
    protocol("promise.create", create("p", timeout_at=5), now=10)
    answer = protocol("promise.settle", {"id": "p", "state": "resolved"}, now=20)
    assert answer.data["promise"]["state"] == "rejected_timedout"
    assert answer.data["promise"]["settledAt"] == 5


# Decision D3: a client may settle to resolved, rejected or rejected_canceled only.


@pytest.mark.parametrize("state", ["pending", "rejected_timedout", "done"])
def test_it_answers_400_for_a_state_a_client_cannot_settle_to(protocol, state):
    protocol("promise.create", create("p"), now=0)
    assert protocol("promise.settle", {"id": "p", "state": state}, now=1).status == 400
    assert protocol.snap()["promises"][0]["state"] == "pending"


# A request reads the clock as it arrives. A settle that arrived first may lock its promise only after a create that
# arrived a moment later has committed: it then acts after the create, and is never stored as settled before it
# (well_formed_promise_created_at_lte_settled_at). Here debug time plays that race: the settle's clock reads earlier.


def test_a_settle_whose_clock_reads_before_the_creation_settles_at_the_creation(protocol):
    protocol("promise.create", create("p", timeout_at=10_000), now=1_000)
    answer = protocol("promise.settle", {"id": "p", "state": "resolved"}, now=900)
    assert answer.status == 200 and answer.data["promise"]["settledAt"] == 1_000


def test_the_same_holds_for_a_promise_with_registrations_and_for_a_fulfil(protocol):
    start(protocol, "w", now=1_000)
    protocol("promise.create", create("q", timeout_at=10_000), now=1_000)
    protocol("promise.register_listener", {"awaited": "q", "address": "poll://uni@g/l"}, now=1_000)
    settled = protocol("promise.settle", {"id": "q", "state": "rejected"}, now=900)
    assert settled.status == 200 and settled.data["promise"]["settledAt"] == 1_000
    fulfil = action("promise.settle", {"id": "w", "state": "resolved"})
    fulfilled = protocol("task.fulfill", {"id": "w", "version": 1, "action": fulfil}, now=900)
    assert fulfilled.status == 200 and fulfilled.data["promise"]["settledAt"] == 1_000
