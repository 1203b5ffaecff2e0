"""S-03 schedule.delete: 404 when missing; otherwise the schedule and its timeout go (its promises stay)."""

TARGET = "poll://any@default"


def schedule(id="s", cron="*/5 * * * * *"):
    return {
        "id": id,
        "cron": cron,
        "promiseId": "{{.id}}.{{.timestamp}}",
        "promiseTimeout": 60_000,
        "promiseTags": {"resonate:target": TARGET},
    }


# S-03:6-8


def test_it_answers_404_for_a_missing_schedule(protocol):
    assert protocol("schedule.delete", {"id": "nope"}, now=0).status == 404


def test_it_answers_404_when_deleting_twice(protocol):
    protocol("schedule.create", schedule(), now=0)
    assert protocol("schedule.delete", {"id": "s"}, now=1).status == 200
    assert protocol("schedule.delete", {"id": "s"}, now=2).status == 404


# S-03:9-12


def test_it_deletes_the_schedule(protocol):
    protocol("schedule.create", schedule(), now=0)
    answer = protocol("schedule.delete", {"id": "s"}, now=1)
    assert answer.status == 200
    assert answer.data == {}
    assert protocol("schedule.get", {"id": "s"}, now=2).status == 404
    assert protocol("schedule.search", {}, now=2).data == {"schedules": []}


def test_it_disarms_the_schedule_timeout(protocol):
    protocol("schedule.create", schedule(), now=0)
    protocol("schedule.delete", {"id": "s"}, now=1)
    protocol.tick(60_000)
    assert protocol.snap()["promises"] == []


def test_it_leaves_the_promises_the_schedule_created(protocol):
    protocol("schedule.create", schedule(), now=0)
    protocol.tick(5_000)
    before = protocol.snap()
    assert [p["id"] for p in before["promises"]] == ["s.5000"]
    protocol("schedule.delete", {"id": "s"}, now=6_000)
    assert protocol.snap() == before


def test_it_leaves_other_schedules_alone(protocol):
    protocol("schedule.create", schedule("a"), now=0)
    protocol("schedule.create", schedule("b"), now=0)
    protocol("schedule.delete", {"id": "a"}, now=1)
    assert protocol("schedule.get", {"id": "b"}, now=2).status == 200
    protocol.tick(5_000)
    assert [p["id"] for p in protocol.snap()["promises"]] == ["b.5000"]
