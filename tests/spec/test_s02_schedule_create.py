"""S-02 schedule.create: existing → unchanged; new → createdAt now, nextRunAt next cron after now, timeout armed."""

import pytest

DAY = 86_400_000


def schedule(id="s", cron="*/5 * * * * *", **extra):
    return {"id": id, "cron": cron, "promiseId": "{{.id}}.{{.timestamp}}", "promiseTimeout": 60_000, **extra}


def next_run(protocol, cron, now):
    answer = protocol("schedule.create", schedule(cron=cron), now=now)
    assert answer.status == 200, answer.data
    return answer.data["schedule"]["nextRunAt"]


# S-02:9-22 — a new schedule.


def test_it_creates_a_schedule(protocol):
    answer = protocol(
        "schedule.create",
        schedule(
            promiseParam={"headers": {"h": "1"}, "data": "e30="}, promiseTags={"resonate:target": "poll://any@default"}
        ),
        now=1_234,
    )
    assert answer.status == 200
    assert answer.data == {
        "schedule": {
            "id": "s",
            "cron": "*/5 * * * * *",
            "promiseId": "{{.id}}.{{.timestamp}}",
            "promiseTimeout": 60_000,
            "promiseParam": {"headers": {"h": "1"}, "data": "e30="},
            "promiseTags": {"resonate:target": "poll://any@default"},
            "createdAt": 1_234,
            "nextRunAt": 5_000,
        }
    }
    assert protocol("schedule.get", {"id": "s"}, now=1_235).data == answer.data


def test_it_defaults_the_promise_param_and_tags_to_empty_objects(protocol):
    answer = protocol("schedule.create", schedule(), now=0)
    assert answer.data["schedule"]["promiseParam"] == {}
    assert answer.data["schedule"]["promiseTags"] == {}
    assert "lastRunAt" not in answer.data["schedule"]


@pytest.mark.parametrize("now, expected", [(0, 5_000), (4_999, 5_000), (5_000, 10_000), (5_001, 10_000)])
def test_it_sets_the_next_run_strictly_after_now_for_a_seconds_field_cron(protocol, now, expected):
    assert next_run(protocol, "*/5 * * * * *", now) == expected


@pytest.mark.parametrize("now, expected", [(0, 60_000), (59_999, 60_000), (60_000, 120_000)])
def test_it_sets_the_next_run_strictly_after_now_for_a_five_field_cron(protocol, now, expected):
    assert next_run(protocol, "* * * * *", now) == expected


def test_it_evaluates_cron_in_utc(protocol):
    assert next_run(protocol, "0 2 * * *", 0) == 2 * 3_600_000  # 1970-01-01T02:00Z


@pytest.mark.parametrize(
    "cron, expected",
    [
        ("0 0 * * 0", 3 * DAY),  # Sunday 1970-01-04 (1970-01-01 was a Thursday)
        ("0 0 * * 7", 3 * DAY),  # 7 is Sunday too
        ("0 0 * * 1", 4 * DAY),  # Monday, not the reference server's Quartz Sunday
        ("0 0 * * SUN", 3 * DAY),
    ],
)
def test_it_numbers_weekdays_as_unix_cron_does(protocol, cron, expected):
    assert next_run(protocol, cron, 0) == expected


def test_it_arms_the_schedule_timeout_at_the_next_run(protocol):
    protocol("schedule.create", schedule(), now=0)
    protocol.tick(4_999)
    assert protocol.snap()["promises"] == []
    protocol.tick(5_000)
    assert [p["id"] for p in protocol.snap()["promises"]] == ["s.5000"]


def test_it_accepts_ids_with_dots_and_tags_without_a_target(protocol):
    # Decision D4: no no-dot schedule ids, no required resonate:target.
    answer = protocol("schedule.create", schedule(id="nightly.report", promiseTags={"k": "v"}), now=0)
    assert answer.status == 200
    assert answer.data["schedule"]["id"] == "nightly.report"


# S-02:6-8 — the schedule exists: returned as stored, the request is not compared.


def test_it_returns_an_existing_schedule_unchanged(protocol):
    first = protocol("schedule.create", schedule(), now=0)
    again = protocol(
        "schedule.create",
        {"id": "s", "cron": "0 0 * * *", "promiseId": "other", "promiseTimeout": 1, "promiseTags": {"k": "v"}},
        now=3_000,
    )
    assert again.status == 200
    assert again.data == first.data
    assert protocol("schedule.get", {"id": "s"}, now=3_001).data == first.data


def test_it_does_not_rearm_an_existing_schedule(protocol):
    protocol("schedule.create", schedule(), now=0)
    protocol("schedule.create", schedule(), now=7_000)  # would be 10000 if created now
    protocol.tick(5_000)
    assert [p["id"] for p in protocol.snap()["promises"]] == ["s.5000"]


# Decision D3: an invalid cron (or other bad input) is a 400 and creates nothing.


@pytest.mark.parametrize("cron", ["", "not a cron", "* * *", "61 * * * *", "* * * * * * *", "0 0 31 2 *"])
def test_it_answers_400_for_an_invalid_cron(protocol, cron):
    assert protocol("schedule.create", schedule(cron=cron), now=0).status == 400
    assert protocol("schedule.get", {"id": "s"}, now=0).status == 404


def test_it_answers_400_for_a_negative_promise_timeout(protocol):
    assert protocol("schedule.create", schedule(promiseTimeout=-1), now=0).status == 400
    assert protocol("schedule.get", {"id": "s"}, now=0).status == 404
