"""S-04 schedule.search: 501 stub, implemented by D5: promiseTags filter, id order, cursor, limits (default 10)."""

import pytest

TARGET = "poll://any@default"


def schedule(id, tags=None):
    return {
        "id": id,
        "cron": "0 * * * *",
        "promiseId": "{{.id}}.{{.timestamp}}",
        "promiseTimeout": 60_000,
        "promiseTags": tags or {},
    }


def search(protocol, now=0, **data):
    answer = protocol("schedule.search", data, now=now)
    assert answer.status == 200, answer.data
    return answer.data


def ids(data):
    return [s["id"] for s in data["schedules"]]


# S-04:5-6 is `return 501`; decision D5 replaces it: searching answers 200.


def test_it_returns_every_schedule_in_id_order(protocol):
    for id in ("c", "a", "b"):
        protocol("schedule.create", schedule(id), now=0)
    data = search(protocol)
    assert ids(data) == ["a", "b", "c"]
    assert "cursor" not in data


def test_it_returns_full_schedule_records(protocol):
    created = protocol("schedule.create", schedule("a", {"resonate:target": TARGET}), now=5)
    assert search(protocol) == {"schedules": [created.data["schedule"]]}


def test_it_returns_an_empty_list_when_there_are_no_schedules(protocol):
    assert search(protocol) == {"schedules": []}


def test_it_filters_by_promise_tags_requiring_every_pair(protocol):
    protocol("schedule.create", schedule("a", {"resonate:target": TARGET, "team": "x"}), now=0)
    protocol("schedule.create", schedule("b", {"resonate:target": TARGET}), now=0)
    protocol("schedule.create", schedule("c", {"resonate:target": "poll://any@other", "team": "x"}), now=0)
    assert ids(search(protocol, tags={"resonate:target": TARGET})) == ["a", "b"]
    assert ids(search(protocol, tags={"team": "x"})) == ["a", "c"]
    assert ids(search(protocol, tags={"resonate:target": TARGET, "team": "x"})) == ["a"]
    assert ids(search(protocol, tags={"team": "y"})) == []


def test_it_returns_at_most_10_schedules_by_default(protocol):
    for n in range(11):
        protocol("schedule.create", schedule(f"s{n:02}"), now=0)
    first = search(protocol)
    assert ids(first) == [f"s{n:02}" for n in range(10)]
    assert first["cursor"] == "s09"
    last = search(protocol, cursor="s09")
    assert ids(last) == ["s10"] and "cursor" not in last


def test_it_pages_with_a_limit_and_cursor(protocol):
    for id in ("a", "b", "c"):
        protocol("schedule.create", schedule(id), now=0)
    first = search(protocol, limit=2)
    assert ids(first) == ["a", "b"] and first["cursor"] == "b"
    last = search(protocol, limit=2, cursor="b")
    assert ids(last) == ["c"] and "cursor" not in last


@pytest.mark.parametrize("limit", [0, 1001])
def test_it_answers_400_for_a_limit_outside_1_to_1000(protocol, limit):
    assert protocol("schedule.search", {"limit": limit}, now=0).status == 400
