"""P-06 promise.search: 501 stub, implemented by D5: projected state and tag filters, id order, cursor, limits."""

import pytest

from tests.conftest import TARGET, create

TIMER = {"resonate:timer": "true"}


def search(protocol, now=0, **data):
    answer = protocol("promise.search", data, now=now)
    assert answer.status == 200, answer.data
    return answer.data


def ids(data):
    return [p["id"] for p in data["promises"]]


# P-06:5-6 is `return 501`; decision D5 replaces it: searching answers 200.


def test_it_returns_every_promise_in_id_order_without_a_cursor(protocol):
    for id in ("b", "a.2", "a", "a.10"):
        protocol("promise.create", create(id), now=0)
    data = search(protocol)
    assert ids(data) == ["a", "a.10", "a.2", "b"]
    assert "cursor" not in data


def test_it_returns_full_promise_records(protocol):
    protocol("promise.create", create("p", param={"data": "eA=="}, tags={"k": "v"}), now=3)
    assert search(protocol) == {
        "promises": [
            {
                "id": "p",
                "state": "pending",
                "param": {"data": "eA=="},
                "value": {},
                "tags": {"k": "v"},
                "timeoutAt": 10_000,
                "createdAt": 3,
            }
        ]
    }


def test_it_returns_an_empty_list_when_nothing_matches(protocol):
    assert search(protocol) == {"promises": []}


def test_it_filters_by_state(protocol):
    for id in ("a", "b", "c"):
        protocol("promise.create", create(id), now=0)
    protocol("promise.settle", {"id": "b", "state": "resolved"}, now=1)
    protocol("promise.settle", {"id": "c", "state": "rejected"}, now=1)
    assert ids(search(protocol, now=2, state="pending")) == ["a"]
    assert ids(search(protocol, now=2, state="resolved")) == ["b"]
    assert ids(search(protocol, now=2, state="rejected")) == ["c"]
    assert ids(search(protocol, now=2, state="rejected_canceled")) == []


# Decision D5: search filters and returns the projected state.


def test_it_finds_an_expired_pending_promise_as_timed_out_not_as_pending(protocol):
    protocol("promise.create", create("late", timeout_at=100), now=0)
    protocol("promise.create", create("live", timeout_at=10_000), now=0)
    assert ids(search(protocol, now=100, state="pending")) == ["live"]
    timed_out = search(protocol, now=100, state="rejected_timedout")
    assert timed_out == {
        "promises": [
            {
                "id": "late",
                "state": "rejected_timedout",
                "param": {},
                "value": {},
                "tags": {},
                "timeoutAt": 100,
                "createdAt": 0,
                "settledAt": 100,
            }
        ]
    }
    assert protocol.snap()["promises"][0]["state"] == "pending"  # nothing written


def test_it_finds_an_expired_timer_as_resolved(protocol):
    protocol("promise.create", create("t", timeout_at=100, tags=TIMER), now=0)
    assert ids(search(protocol, now=99, state="pending")) == ["t"]
    assert ids(search(protocol, now=100, state="pending")) == []
    assert ids(search(protocol, now=100, state="rejected_timedout")) == []
    resolved = search(protocol, now=100, state="resolved")["promises"]
    assert [(p["id"], p["state"], p["settledAt"]) for p in resolved] == [("t", "resolved", 100)]


def test_it_returns_expired_promises_projected_when_not_filtering_by_state(protocol):
    protocol("promise.create", create("p", timeout_at=100), now=0)
    [record] = search(protocol, now=500)["promises"]
    assert record["state"] == "rejected_timedout"
    assert record["settledAt"] == 100


def test_it_filters_by_tags_requiring_every_pair(protocol):
    protocol("promise.create", create("a", tags={"x": "1", "y": "2"}), now=0)
    protocol("promise.create", create("b", tags={"x": "1"}), now=0)
    protocol("promise.create", create("c", tags={"x": "2", "y": "2"}), now=0)
    assert ids(search(protocol, tags={"x": "1"})) == ["a", "b"]
    assert ids(search(protocol, tags={"x": "1", "y": "2"})) == ["a"]
    assert ids(search(protocol, tags={"z": "1"})) == []
    assert ids(search(protocol, tags={})) == ["a", "b", "c"]


def test_it_filters_by_a_plain_string_tag_value(protocol):
    protocol("promise.create", create("a", tags={"resonate:target": TARGET}), now=0)
    protocol("promise.create", create("b", tags={"resonate:target": "poll://any@other"}), now=0)
    assert ids(search(protocol, tags={"resonate:target": TARGET})) == ["a"]


def test_it_combines_state_and_tag_filters(protocol):
    protocol("promise.create", create("a", tags={"x": "1"}), now=0)
    protocol("promise.create", create("b", tags={"x": "1"}), now=0)
    protocol("promise.settle", {"id": "b", "state": "resolved"}, now=1)
    assert ids(search(protocol, now=2, state="resolved", tags={"x": "1"})) == ["b"]


def test_it_pages_by_id_with_a_cursor_that_is_omitted_on_the_last_page(protocol):
    for id in ("e", "d", "c", "b", "a"):
        protocol("promise.create", create(id), now=0)
    first = search(protocol, limit=2)
    assert ids(first) == ["a", "b"] and first["cursor"] == "b"
    second = search(protocol, limit=2, cursor=first["cursor"])
    assert ids(second) == ["c", "d"] and second["cursor"] == "d"
    last = search(protocol, limit=2, cursor=second["cursor"])
    assert ids(last) == ["e"]
    assert "cursor" not in last


def test_it_omits_the_cursor_when_the_page_is_exactly_full(protocol):
    for id in ("a", "b"):
        protocol("promise.create", create(id), now=0)
    assert "cursor" not in search(protocol, limit=2)


def test_it_returns_at_most_100_promises_by_default(protocol):
    for n in range(101):
        protocol("promise.create", create(f"p{n:03}"), now=0)
    data = search(protocol)
    assert len(data["promises"]) == 100
    assert data["cursor"] == "p099"
    assert ids(search(protocol, cursor="p099")) == ["p100"]


@pytest.mark.parametrize("limit", [0, -1, 1001])
def test_it_answers_400_for_a_limit_outside_1_to_1000(protocol, limit):
    assert protocol("promise.search", {"limit": limit}, now=0).status == 400


@pytest.mark.parametrize("limit", [1, 1000])
def test_it_accepts_limits_at_the_bounds(protocol, limit):
    protocol("promise.create", create("a"), now=0)
    assert ids(search(protocol, limit=limit)) == ["a"]


def test_it_answers_400_for_an_unknown_state(protocol):
    assert protocol("promise.search", {"state": "done"}, now=0).status == 400
