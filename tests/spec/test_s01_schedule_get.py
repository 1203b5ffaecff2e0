"""S-01 schedule.get: 404 when missing, otherwise the stored schedule."""


def schedule(id="s", cron="*/5 * * * * *", **extra):
    return {"id": id, "cron": cron, "promiseId": "{{.id}}.{{.timestamp}}", "promiseTimeout": 60_000, **extra}


# S-01:6-8


def test_it_answers_404_for_a_missing_schedule(protocol):
    assert protocol("schedule.get", {"id": "nope"}, now=0).status == 404


def test_it_answers_404_for_a_deleted_schedule(protocol):
    protocol("schedule.create", schedule(), now=0)
    protocol("schedule.delete", {"id": "s"}, now=1)
    assert protocol("schedule.get", {"id": "s"}, now=2).status == 404


# S-01:9-10


def test_it_returns_the_stored_schedule(protocol):
    created = protocol(
        "schedule.create",
        schedule(promiseParam={"data": "e30="}, promiseTags={"resonate:target": "poll://any@default"}),
        now=1_000,
    )
    answer = protocol("schedule.get", {"id": "s"}, now=2_000)
    assert answer.status == 200
    assert answer.data == created.data
    assert answer.data == {
        "schedule": {
            "id": "s",
            "cron": "*/5 * * * * *",
            "promiseId": "{{.id}}.{{.timestamp}}",
            "promiseTimeout": 60_000,
            "promiseParam": {"data": "e30="},
            "promiseTags": {"resonate:target": "poll://any@default"},
            "createdAt": 1_000,
            "nextRunAt": 5_000,
        }
    }


def test_it_returns_the_schedule_with_its_last_run_after_it_fired(protocol):
    protocol("schedule.create", schedule(), now=0)
    protocol.tick(5_000)
    answer = protocol("schedule.get", {"id": "s"}, now=5_000)
    assert answer.data["schedule"]["lastRunAt"] == 5_000
    assert answer.data["schedule"]["nextRunAt"] == 10_000
