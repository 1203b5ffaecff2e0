"""T-11 task.search: 501 stub, implemented by D5: tasks as task.get shows them, state filter, id order, cursor."""

import pytest

from tests.conftest import create, targeted


def search(protocol, now=0, **data):
    answer = protocol("task.search", data, now=now)
    assert answer.status == 200, answer.data
    return answer.data


def ids(data):
    return [t["id"] for t in data["tasks"]]


# T-11:5-6 is `return 501`; decision D5 replaces it: searching answers 200.


def test_it_returns_every_task_in_id_order_without_a_cursor(protocol):
    for id in ("b", "a.2", "a"):
        protocol("promise.create", targeted(id), now=0)
    protocol("promise.create", create("untargeted"), now=0)  # no task
    data = search(protocol)
    assert ids(data) == ["a", "a.2", "b"]
    assert "cursor" not in data


def test_it_returns_full_task_records(protocol):
    protocol("promise.create", targeted("p"), now=0)
    protocol("task.acquire", {"id": "p", "version": 0, "pid": "w-7", "ttl": 60_000}, now=1)
    assert search(protocol, now=2) == {
        "tasks": [{"id": "p", "state": "acquired", "version": 1, "resumes": 0, "ttl": 60_000, "pid": "w-7"}]
    }


def test_it_returns_an_empty_list_when_there_are_no_tasks(protocol):
    assert search(protocol) == {"tasks": []}


def test_it_filters_by_state(protocol):
    for id in ("a", "b", "c", "d"):
        protocol("promise.create", targeted(id), now=0)
    protocol("task.acquire", {"id": "b", "version": 0, "pid": "w", "ttl": 60_000}, now=1)
    protocol("task.halt", {"id": "c"}, now=1)
    protocol("promise.settle", {"id": "d", "state": "resolved"}, now=1)
    assert ids(search(protocol, now=2, state="pending")) == ["a"]
    assert ids(search(protocol, now=2, state="acquired")) == ["b"]
    assert ids(search(protocol, now=2, state="halted")) == ["c"]
    assert ids(search(protocol, now=2, state="fulfilled")) == ["d"]
    assert ids(search(protocol, now=2, state="suspended")) == []


def test_it_finds_the_task_of_an_expired_promise_as_fulfilled(protocol):
    protocol("promise.create", targeted("late", timeout_at=100), now=0)
    protocol("promise.create", targeted("live"), now=0)
    protocol("task.acquire", {"id": "late", "version": 0, "pid": "w", "ttl": 60_000}, now=1)
    assert ids(search(protocol, now=100, state="acquired")) == []
    assert search(protocol, now=100, state="fulfilled") == {
        "tasks": [{"id": "late", "state": "fulfilled", "version": 1, "resumes": 0}]
    }
    assert ids(search(protocol, now=100, state="pending")) == ["live"]
    assert protocol.snap()["tasks"][0]["state"] == "acquired"  # nothing written


def test_it_pages_by_id_with_a_cursor_that_is_omitted_on_the_last_page(protocol):
    for id in ("e", "d", "c", "b", "a"):
        protocol("promise.create", targeted(id), now=0)
    first = search(protocol, limit=2)
    assert ids(first) == ["a", "b"] and first["cursor"] == "b"
    second = search(protocol, limit=2, cursor="b")
    assert ids(second) == ["c", "d"] and second["cursor"] == "d"
    last = search(protocol, limit=2, cursor="d")
    assert ids(last) == ["e"] and "cursor" not in last


def test_it_returns_at_most_100_tasks_by_default(protocol):
    for n in range(101):
        protocol("promise.create", targeted(f"t{n:03}"), now=0)
    data = search(protocol)
    assert len(data["tasks"]) == 100
    assert data["cursor"] == "t099"


@pytest.mark.parametrize("limit", [0, 1001])
def test_it_answers_400_for_a_limit_outside_1_to_1000(protocol, limit):
    assert protocol("task.search", {"limit": limit}, now=0).status == 400


def test_it_answers_400_for_an_unknown_state(protocol):
    assert protocol("task.search", {"state": "running"}, now=0).status == 400
