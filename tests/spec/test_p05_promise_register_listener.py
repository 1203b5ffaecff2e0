"""P-05 promise.register_listener: 404; registered only while live; answered as stored or projected."""

import pytest

from tests.conftest import create

ADDRESS = "poll://uni@default/w-1"
TIMER = {"resonate:timer": "true"}


def listen(protocol, awaited, now, address=ADDRESS):
    return protocol("promise.register_listener", {"awaited": awaited, "address": address}, now=now)


# P-05:6-8


def test_it_answers_404_for_a_missing_promise(protocol):
    assert listen(protocol, "nope", now=0).status == 404
    assert protocol.snap()["listeners"] == []


# P-05:10-13 — a live promise: the listener is added (once) and the promise returned as stored.


def test_it_registers_a_listener_on_a_live_promise(protocol):
    created = protocol("promise.create", create("p", param={"data": "eA=="}), now=0)
    answer = listen(protocol, "p", now=5)
    assert answer.status == 200
    assert answer.data == created.data
    assert protocol.snap()["listeners"] == [{"id": "p", "address": ADDRESS}]


def test_it_registers_an_address_only_once(protocol):
    protocol("promise.create", create("p"), now=0)
    listen(protocol, "p", now=1)
    listen(protocol, "p", now=2)
    assert protocol.snap()["listeners"] == [{"id": "p", "address": ADDRESS}]


def test_it_keeps_one_listener_per_address(protocol):
    protocol("promise.create", create("p"), now=0)
    listen(protocol, "p", now=1, address="https://example.com/hook")
    listen(protocol, "p", now=2)
    assert protocol.snap()["listeners"] == [
        {"id": "p", "address": "https://example.com/hook"},
        {"id": "p", "address": ADDRESS},
    ]


def test_a_registered_listener_gets_an_unblock_when_the_promise_settles(protocol):
    protocol("promise.create", create("p"), now=0)
    listen(protocol, "p", now=1)
    settled = protocol("promise.settle", {"id": "p", "state": "resolved", "value": {"data": "eA=="}}, now=2)
    assert protocol.snap()["messages"] == [
        {
            "address": ADDRESS,
            "message": {"kind": "unblock", "head": {}, "data": {"promise": settled.data["promise"]}},
        }
    ]


# P-05:14-20 — pending but expired: answered projected, nothing registered.


def test_it_answers_an_expired_promise_as_timed_out_without_registering(protocol):
    protocol("promise.create", create("p", timeout_at=100), now=0)
    answer = listen(protocol, "p", now=100)
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
    snap = protocol.snap()
    assert snap["listeners"] == []
    assert snap["promises"][0]["state"] == "pending"


def test_it_answers_an_expired_timer_as_resolved_without_registering(protocol):
    protocol("promise.create", create("t", timeout_at=100, tags=TIMER), now=0)
    answer = listen(protocol, "t", now=101)
    assert answer.data["promise"]["state"] == "resolved"
    assert answer.data["promise"]["settledAt"] == 100
    assert protocol.snap()["listeners"] == []


# P-05:21-22 — settled: answered as stored, nothing registered.


def test_it_answers_a_settled_promise_as_stored_without_registering(protocol):
    protocol("promise.create", create("p"), now=0)
    settled = protocol("promise.settle", {"id": "p", "state": "rejected_canceled"}, now=1)
    before = protocol.snap()
    answer = listen(protocol, "p", now=2)
    assert answer.status == 200
    assert answer.data == settled.data
    assert protocol.snap() == before


# Decision D3: a listener address must be poll://uni|any@group[/id] or http(s)://.


@pytest.mark.parametrize("address", ["", "nowhere", "poll://someone@group", "ftp://host/x"])
def test_it_answers_400_for_an_unusable_address(protocol, address):
    protocol("promise.create", create("p"), now=0)
    assert listen(protocol, "p", now=1, address=address).status == 400
    assert protocol.snap()["listeners"] == []
