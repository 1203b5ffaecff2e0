"""P-01 promise.get: 404 when missing; the stored record, or its projection once the deadline has passed."""

from tests.conftest import create


def test_it_answers_404_for_a_missing_promise(protocol):
    assert protocol("promise.get", {"id": "nope"}).status == 404


def test_it_returns_a_pending_promise_as_stored(protocol):
    protocol("promise.create", create("p", timeout_at=100), now=0)
    answer = protocol("promise.get", {"id": "p"}, now=99)
    assert answer.status == 200
    assert answer.data["promise"]["state"] == "pending"
    assert "settledAt" not in answer.data["promise"]


def test_it_projects_an_expired_promise_as_timed_out_without_writing(protocol):
    protocol("promise.create", create("p", timeout_at=100), now=0)
    answer = protocol("promise.get", {"id": "p"}, now=100)
    assert answer.data["promise"]["state"] == "rejected_timedout"
    assert answer.data["promise"]["settledAt"] == 100
    assert protocol.snap()["promises"][0]["state"] == "pending"


def test_it_projects_an_expired_timer_as_resolved(protocol):
    protocol("promise.create", create("t", timeout_at=100, tags={"resonate:timer": "true"}), now=0)
    answer = protocol("promise.get", {"id": "t"}, now=150)
    assert answer.data["promise"]["state"] == "resolved"
    assert answer.data["promise"]["settledAt"] == 100


def test_it_returns_a_settled_promise_as_stored(protocol):
    protocol("promise.create", create("p", timeout_at=100), now=0)
    protocol("promise.settle", {"id": "p", "state": "resolved", "value": {"data": "eA=="}}, now=10)
    answer = protocol("promise.get", {"id": "p"}, now=500)
    assert answer.data["promise"]["state"] == "resolved"
    assert answer.data["promise"]["value"] == {"data": "eA=="}
    assert answer.data["promise"]["settledAt"] == 10
