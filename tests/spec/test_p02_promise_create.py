"""P-02 promise.create: new → pending (armed, task, delay) or born settled; existing → returned as it reads now."""

import pytest

from tests.conftest import TARGET, create, execute, targeted

TIMER = {"resonate:timer": "true"}


# P-02:8-17 — the promise does not exist and its deadline is ahead: it is stored pending, created now.


def test_it_creates_a_pending_promise_created_now(protocol):
    answer = protocol("promise.create", create("p", timeout_at=10_000, param={"data": "eA=="}), now=7)
    assert answer.status == 200
    expected = {
        "id": "p",
        "state": "pending",
        "param": {"data": "eA=="},
        "value": {},
        "tags": {},
        "timeoutAt": 10_000,
        "createdAt": 7,
    }
    assert answer.data == {"promise": expected}
    assert protocol.snap()["promises"] == [expected]


def test_it_stores_param_headers_and_tags_verbatim(protocol):
    param = {"headers": {"k": "v"}, "data": "eyJ4IjoxfQ=="}
    tags = {"resonate:origin": "o", "resonate:branch": "b", "user": "x"}
    answer = protocol("promise.create", create("p", tags=tags, param=param), now=0)
    assert answer.data["promise"]["param"] == param
    assert answer.data["promise"]["tags"] == tags


# P-02:18-19 — only external promises get a promise timeout.


def test_it_arms_no_timeout_for_a_promise_that_is_not_external(protocol):
    protocol("promise.create", create("p", timeout_at=10_000), now=0)
    snap = protocol.snap()
    assert snap["promiseTimeouts"] == []
    assert snap["tasks"] == [] and snap["taskTimeouts"] == [] and snap["messages"] == []


def test_it_arms_a_timeout_at_the_deadline_for_a_timer(protocol):
    protocol("promise.create", create("t", timeout_at=10_000, tags=TIMER), now=0)
    snap = protocol.snap()
    assert snap["promiseTimeouts"] == [{"id": "t", "timeout": 10_000}]
    assert snap["tasks"] == []  # a timer has no target, so no task (P-02:20-22)


def test_it_arms_a_timeout_for_a_promise_tagged_external(protocol):
    # Extension E2 (decision D11): resonate:external = "true" is external too.
    protocol("promise.create", create("e", timeout_at=10_000, tags={"resonate:external": "true"}), now=0)
    assert protocol.snap()["promiseTimeouts"] == [{"id": "e", "timeout": 10_000}]


def test_it_does_not_treat_other_values_of_the_timer_tag_as_a_timer(protocol):
    protocol("promise.create", create("t", timeout_at=10_000, tags={"resonate:timer": "false"}), now=0)
    assert protocol.snap()["promiseTimeouts"] == []


# P-02:23-30 — a target creates a pending task at version 0, dispatched now with a retry timeout.


def test_it_creates_a_pending_task_and_dispatches_it_to_the_target(protocol):
    answer = protocol("promise.create", targeted("p", timeout_at=10_000), now=100)
    assert answer.status == 200
    assert answer.data["promise"]["state"] == "pending"
    snap = protocol.snap()
    assert snap["promiseTimeouts"] == [{"id": "p", "timeout": 10_000}]
    assert snap["tasks"] == [{"id": "p", "state": "pending", "version": 0, "resumes": 0}]
    assert snap["taskTimeouts"] == [{"id": "p", "type": 0, "timeout": 5_100}]  # now + retryTimeout
    assert snap["messages"] == [execute("p", 0)]


def test_it_dispatches_to_the_address_in_the_target_tag(protocol):
    address = "poll://uni@workers/w-7"
    protocol("promise.create", create("p", tags={"resonate:target": address}), now=0)
    assert protocol.snap()["messages"][0]["address"] == address


# P-02:31-35 — a delay in the future holds the dispatch: the retry timeout waits for it, no message yet.


def test_it_holds_the_task_until_a_future_delay(protocol):
    protocol("promise.create", targeted("p", tags={"resonate:delay": "3000"}), now=100)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "p", "state": "pending", "version": 0, "resumes": 0}]
    assert snap["taskTimeouts"] == [{"id": "p", "type": 0, "timeout": 3_000}]
    assert snap["messages"] == []


# P-02:36-39 — a delay that is not in the future dispatches at once.


@pytest.mark.parametrize("delay", ["100", "0"])
def test_it_dispatches_at_once_when_the_delay_is_not_in_the_future(protocol, delay):
    protocol("promise.create", targeted("p", tags={"resonate:delay": delay}), now=100)
    snap = protocol.snap()
    assert snap["taskTimeouts"] == [{"id": "p", "type": 0, "timeout": 5_100}]
    assert snap["messages"] == [execute("p", 0)]


# P-02:40-53 — the promise does not exist and its deadline has passed: it is born settled at the deadline.


def test_it_creates_an_expired_promise_already_timed_out(protocol):
    answer = protocol("promise.create", create("p", timeout_at=50), now=100)
    expected = {
        "id": "p",
        "state": "rejected_timedout",
        "param": {},
        "value": {},
        "tags": {},
        "timeoutAt": 50,
        "createdAt": 50,
        "settledAt": 50,
    }
    assert answer.status == 200
    assert answer.data == {"promise": expected}
    snap = protocol.snap()
    assert snap["promises"] == [expected]
    assert snap["promiseTimeouts"] == [] and snap["tasks"] == []  # P-02:61-62


def test_it_counts_a_deadline_equal_to_now_as_expired(protocol):
    answer = protocol("promise.create", create("p", timeout_at=100), now=100)
    assert answer.data["promise"]["state"] == "rejected_timedout"
    assert answer.data["promise"]["settledAt"] == 100


def test_it_creates_an_expired_timer_already_resolved(protocol):
    answer = protocol("promise.create", create("t", timeout_at=50, tags=TIMER), now=100)
    assert answer.data["promise"]["state"] == "resolved"
    assert answer.data["promise"]["createdAt"] == 50
    assert answer.data["promise"]["settledAt"] == 50
    assert protocol.snap()["promiseTimeouts"] == []


# P-02:55-60 — an expired targeted promise gets a task born fulfilled at version 0, with nothing to dispatch.


def test_it_gives_an_expired_targeted_promise_a_fulfilled_task_and_sends_nothing(protocol):
    answer = protocol("promise.create", targeted("p", timeout_at=50), now=100)
    assert answer.data["promise"]["state"] == "rejected_timedout"
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "p", "state": "fulfilled", "version": 0, "resumes": 0}]
    assert snap["promiseTimeouts"] == []
    assert snap["taskTimeouts"] == []
    assert snap["messages"] == []


# P-02:63-70 — the promise exists, pending, past its deadline: it is answered as settled, nothing is written.


def test_it_returns_an_existing_expired_promise_projected_as_timed_out(protocol):
    protocol("promise.create", create("p", timeout_at=100), now=0)
    answer = protocol("promise.create", create("p", timeout_at=100), now=150)
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
    stored = protocol.snap()["promises"][0]
    assert stored["state"] == "pending" and "settledAt" not in stored


def test_it_returns_an_existing_expired_timer_projected_as_resolved(protocol):
    protocol("promise.create", create("t", timeout_at=100, tags=TIMER), now=0)
    answer = protocol("promise.create", create("t", timeout_at=100, tags=TIMER), now=100)
    assert answer.data["promise"]["state"] == "resolved"
    assert answer.data["promise"]["settledAt"] == 100
    assert protocol.snap()["promises"][0]["state"] == "pending"


# P-02:71-72 — otherwise the existing promise is returned as stored; the request is not compared.


def test_it_returns_an_existing_pending_promise_unchanged_whatever_the_request_says(protocol):
    first = protocol("promise.create", create("p", timeout_at=10_000, param={"data": "YQ=="}), now=0)
    before = protocol.snap()
    again = protocol(
        "promise.create",
        targeted("p", timeout_at=99_999, tags={"k": "v"}, param={"data": "Yg=="}),
        now=5,
    )
    assert again.status == 200
    assert again.data == first.data
    assert protocol.snap() == before  # no task, no timeout, no message for the second request


def test_it_returns_an_existing_settled_promise_as_stored(protocol):
    protocol("promise.create", create("p", timeout_at=10_000), now=0)
    settled = protocol("promise.settle", {"id": "p", "state": "rejected", "value": {"data": "eA=="}}, now=10)
    answer = protocol("promise.create", create("p", timeout_at=10_000), now=20_000)
    assert answer.status == 200
    assert answer.data == settled.data
    assert answer.data["promise"]["state"] == "rejected"


def test_it_does_not_create_a_second_task_for_an_existing_targeted_promise(protocol):
    protocol("promise.create", targeted("p"), now=0)
    before = protocol.snap()
    protocol("promise.create", targeted("p"), now=1_000)
    assert protocol.snap() == before


# Decision D3: bad input is a 400 and writes nothing.


@pytest.mark.parametrize(
    "tags",
    [
        {"resonate:target": "not an address"},
        {"resonate:target": "poll://someone@group"},
        {"resonate:target": TARGET, "resonate:delay": "soon"},
    ],
)
def test_it_answers_400_for_unusable_reserved_tags_and_writes_nothing(protocol, tags):
    answer = protocol("promise.create", create("p", tags=tags), now=0)
    assert answer.status == 400
    assert protocol.snap()["promises"] == []


def test_it_answers_400_for_a_negative_deadline(protocol):
    assert protocol("promise.create", {"id": "p", "timeoutAt": -1, "tags": {}}, now=0).status == 400
    assert protocol.snap()["promises"] == []
