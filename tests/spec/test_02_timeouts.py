"""02-timeouts: promise, retry, lease and schedule (catchUp) timeouts, and the D15 sweep order, via debug.tick."""

import signal

from tests.conftest import TARGET, action, create, execute, targeted

TIMER = {"resonate:timer": "true"}


def task_create(protocol, data, now, pid="w", ttl=60_000):
    answer = protocol("task.create", {"pid": pid, "ttl": ttl, "action": action("promise.create", data)}, now=now)
    assert answer.status == 200 and answer.data["task"]["state"] == "acquired"
    return answer


def suspend(protocol, id, awaited, now, version=1):
    actions = [action("promise.register_callback", {"awaited": a, "awaiter": id}) for a in awaited]
    assert protocol("task.suspend", {"id": id, "version": version, "actions": actions}, now=now).status == 200


def by_id(records):
    return {r["id"]: r for r in records}


def timeouts(snap):
    return {t["id"]: (t["type"], t["timeout"]) for t in snap["taskTimeouts"]}


# onPromiseTimeout (02-timeouts:8-41)


def test_a_promise_timeout_does_not_fire_before_the_deadline(protocol):
    protocol("promise.create", create("t", timeout_at=1_000, tags=TIMER), now=0)
    before = protocol.snap()
    protocol.tick(999)
    assert protocol.snap() == before


def test_a_promise_timeout_rejects_a_promise_at_its_deadline(protocol):
    # 02-timeouts:18-24 — settledAt is the deadline, not the tick time; the timeout is disarmed.
    protocol("promise.create", create("p", timeout_at=1_000, tags={"resonate:external": "true"}), now=0)
    protocol.tick(1_500)
    snap = protocol.snap()
    assert snap["promises"] == [
        {
            "id": "p",
            "state": "rejected_timedout",
            "param": {},
            "value": {},
            "tags": {"resonate:external": "true"},
            "timeoutAt": 1_000,
            "createdAt": 0,
            "settledAt": 1_000,
        }
    ]
    assert snap["promiseTimeouts"] == []


def test_a_promise_timeout_resolves_a_timer(protocol):
    protocol("promise.create", create("t", timeout_at=1_000, tags=TIMER), now=0)
    protocol.tick(1_000)
    [promise] = protocol.snap()["promises"]
    assert (promise["state"], promise["settledAt"], promise["value"]) == ("resolved", 1_000, {})


def test_a_promise_that_is_not_external_is_never_timed_out_by_the_sweep(protocol):
    protocol("promise.create", create("p", timeout_at=1_000), now=0)
    protocol.tick(50_000)
    assert protocol.snap()["promises"][0]["state"] == "pending"  # only projected, never written


def test_a_settled_promise_is_not_timed_out_again(protocol):
    # 02-timeouts:13-14 — settlement disarms the timeout, so the sweep leaves the promise alone.
    protocol("promise.create", create("t", timeout_at=1_000, tags=TIMER), now=0)
    protocol("promise.settle", {"id": "t", "state": "rejected"}, now=10)
    before = protocol.snap()
    protocol.tick(2_000)
    assert protocol.snap() == before


def test_a_promise_timeout_fulfils_the_task_and_drops_its_lease(protocol):
    # 02-timeouts:25-28
    task_create(protocol, targeted("p", timeout_at=1_000), now=0, ttl=60_000)
    protocol.tick(1_000)
    snap = protocol.snap()
    assert snap["promises"][0]["state"] == "rejected_timedout"
    assert snap["tasks"] == [{"id": "p", "state": "fulfilled", "version": 1, "resumes": 0}]
    assert snap["taskTimeouts"] == []
    assert snap["messages"] == []


def test_a_promise_timeout_scrubs_the_callbacks_of_its_promise(protocol):
    # 02-timeouts:31-37 — the timed-out awaiter can never be resumed.
    protocol("promise.create", create("a"), now=0)
    task_create(protocol, targeted("w", timeout_at=1_000), now=0)
    suspend(protocol, "w", ["a"], now=1)
    protocol.tick(1_000)
    assert protocol.snap()["callbacks"] == []
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=1_001)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "w", "state": "fulfilled", "version": 1, "resumes": 0}]
    assert snap["messages"] == []


def test_a_promise_timeout_sends_an_unblock_to_every_listener(protocol):
    # 02-timeouts:38-39
    protocol("promise.create", create("t", timeout_at=1_000, tags=TIMER), now=0)
    protocol("promise.register_listener", {"awaited": "t", "address": "poll://uni@g/a"}, now=1)
    protocol("promise.register_listener", {"awaited": "t", "address": "poll://uni@g/b"}, now=1)
    protocol.tick(1_200)
    snap = protocol.snap()
    record = snap["promises"][0]
    assert snap["listeners"] == []
    assert snap["messages"] == [
        {"address": "poll://uni@g/a", "message": {"kind": "unblock", "head": {}, "data": {"promise": record}}},
        {"address": "poll://uni@g/b", "message": {"kind": "unblock", "head": {}, "data": {"promise": record}}},
    ]


def test_a_promise_timeout_resumes_its_awaiters_at_the_tick_time(protocol):
    # 02-timeouts:40-41
    protocol("promise.create", create("t", timeout_at=1_000, tags=TIMER), now=0)
    task_create(protocol, targeted("w"), now=0)
    suspend(protocol, "w", ["t"], now=1)
    protocol.tick(1_300)
    snap = protocol.snap()
    assert snap["callbacks"] == []
    assert by_id(snap["tasks"])["w"] == {"id": "w", "state": "pending", "version": 1, "resumes": 1}
    assert timeouts(snap) == {"w": (0, 6_300)}
    assert snap["messages"] == [execute("w", 1)]


# onTaskRetryTimeout (02-timeouts:43-57)


def test_a_retry_timeout_does_not_fire_before_it_is_due(protocol):
    protocol("promise.create", targeted("p", tags={"resonate:delay": "3000"}), now=0)
    protocol.tick(2_999)
    snap = protocol.snap()
    assert snap["messages"] == []
    assert timeouts(snap) == {"p": (0, 3_000)}


def test_a_retry_timeout_re_sends_the_execute_and_re_arms(protocol):
    protocol("promise.create", targeted("p", tags={"resonate:delay": "3000"}), now=0)
    protocol.tick(3_100)
    snap = protocol.snap()
    assert snap["messages"] == [execute("p", 0)]
    assert timeouts(snap) == {"p": (0, 8_100)}
    assert snap["tasks"] == [{"id": "p", "state": "pending", "version": 0, "resumes": 0}]
    protocol.tick(8_100)
    assert timeouts(protocol.snap()) == {"p": (0, 13_100)}


def test_a_retry_timeout_re_sends_the_current_version(protocol):
    protocol("promise.create", targeted("p"), now=0)
    protocol("task.acquire", {"id": "p", "version": 0, "pid": "w", "ttl": 60_000}, now=1)
    protocol("task.release", {"id": "p", "version": 1}, now=2)  # retry at 5002
    protocol.tick(5_002)
    snap = protocol.snap()
    assert snap["messages"] == [execute("p", 1)]
    assert timeouts(snap) == {"p": (0, 10_002)}


# onTaskLeaseTimeout (02-timeouts:59-75)


def test_a_lease_does_not_lapse_before_it_is_due(protocol):
    task_create(protocol, targeted("p"), now=0, ttl=1_000)
    protocol.tick(999)
    assert protocol.snap()["tasks"][0]["state"] == "acquired"


def test_a_lapsed_lease_returns_the_task_to_pending_and_re_dispatches_it(protocol):
    task_create(protocol, targeted("p"), now=0, ttl=1_000)
    protocol.tick(1_000)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "p", "state": "pending", "version": 1, "resumes": 0}]  # version unchanged
    assert timeouts(snap) == {"p": (0, 6_000)}
    assert snap["messages"] == [execute("p", 1)]


def test_a_lapsed_lease_keeps_the_buffered_resumes(protocol):
    protocol("promise.create", create("a"), now=0)
    task_create(protocol, targeted("p"), now=0, ttl=1_000)
    protocol("promise.register_callback", {"awaited": "a", "awaiter": "p"}, now=1)
    protocol("promise.settle", {"id": "a", "state": "resolved"}, now=2)
    protocol.tick(1_000)
    assert by_id(protocol.snap()["tasks"])["p"]["resumes"] == 1


def test_a_lapsed_lease_of_an_untargeted_task_sends_its_execute_to_the_empty_address(protocol):
    # 02-timeouts:75 — the target defaults to "" (task.create does not require a target, decision D4).
    task_create(protocol, create("p"), now=0, ttl=1_000)
    protocol.tick(1_000)
    assert protocol.snap()["messages"] == [execute("p", 1, address="")]


# onScheduleTimeout and catchUp (02-timeouts:77-96)


def schedule(id="s", cron="*/5 * * * * *", promise_id="{{.id}}.{{.timestamp}}", timeout=60_000, tags=None, param=None):
    data = {"id": id, "cron": cron, "promiseId": promise_id, "promiseTimeout": timeout}
    data["promiseTags"] = {"resonate:target": TARGET} if tags is None else tags
    if param is not None:
        data["promiseParam"] = param
    return data


def test_a_schedule_does_not_fire_before_its_next_run(protocol):
    protocol("schedule.create", schedule(), now=0)
    protocol.tick(4_999)
    assert protocol.snap()["promises"] == []
    assert "lastRunAt" not in protocol("schedule.get", {"id": "s"}, now=4_999).data["schedule"]


def test_a_schedule_creates_its_promise_as_if_created_at_the_cron_time(protocol):
    tags = {"resonate:target": TARGET, "team": "x"}
    protocol("schedule.create", schedule(tags=tags, param={"data": "e30="}), now=0)
    protocol.tick(5_000)
    snap = protocol.snap()
    promise = {
        "id": "s.5000",
        "state": "pending",
        "param": {"data": "e30="},
        "value": {},
        "tags": tags,  # verbatim (decision D8): no tags added
        "timeoutAt": 65_000,
        "createdAt": 5_000,
    }
    assert snap["promises"] == [promise]
    assert snap["promiseTimeouts"] == [{"id": "s.5000", "timeout": 65_000}]
    assert snap["tasks"] == [{"id": "s.5000", "state": "pending", "version": 0, "resumes": 0}]
    assert timeouts(snap) == {"s.5000": (0, 10_000)}
    assert snap["messages"] == [execute("s.5000", 0)]
    record = protocol("schedule.get", {"id": "s"}, now=5_000).data["schedule"]
    assert (record["lastRunAt"], record["nextRunAt"]) == (5_000, 10_000)


def test_a_schedule_catches_up_every_missed_occurrence_in_one_tick(protocol):
    protocol("schedule.create", schedule(tags={}), now=0)
    protocol.tick(17_000)
    promises = protocol.snap()["promises"]
    assert [(p["id"], p["createdAt"], p["timeoutAt"]) for p in promises] == [
        ("s.10000", 10_000, 70_000),
        ("s.15000", 15_000, 75_000),
        ("s.5000", 5_000, 65_000),
    ]
    record = protocol("schedule.get", {"id": "s"}, now=17_000).data["schedule"]
    assert (record["lastRunAt"], record["nextRunAt"]) == (15_000, 20_000)
    protocol.tick(20_000)  # the timeout was re-armed at the new next run
    assert len(protocol.snap()["promises"]) == 4


def test_an_occurrence_with_a_zero_timeout_is_born_timed_out(protocol):
    # catchUp calls promiseCreate with now = cronTime, so timeoutAt = cronTime is already expired (P-02:40-60).
    protocol("schedule.create", schedule(timeout=0), now=0)
    protocol.tick(5_000)
    snap = protocol.snap()
    assert snap["promises"] == [
        {
            "id": "s.5000",
            "state": "rejected_timedout",
            "param": {},
            "value": {},
            "tags": {"resonate:target": TARGET},
            "timeoutAt": 5_000,
            "createdAt": 5_000,
            "settledAt": 5_000,
        }
    ]
    assert snap["tasks"] == [{"id": "s.5000", "state": "fulfilled", "version": 0, "resumes": 0}]
    assert snap["messages"] == []


def test_a_template_without_a_timestamp_creates_one_promise_and_the_schedule_still_advances(protocol):
    protocol("schedule.create", schedule(promise_id="job-{{.id}}"), now=0)
    protocol.tick(12_000)
    promises = protocol.snap()["promises"]
    assert [(p["id"], p["createdAt"]) for p in promises] == [("job-s", 5_000)]
    record = protocol("schedule.get", {"id": "s"}, now=12_000).data["schedule"]
    assert (record["lastRunAt"], record["nextRunAt"]) == (10_000, 15_000)


def test_a_schedule_fires_a_five_field_cron_on_the_minute(protocol):
    protocol("schedule.create", schedule(cron="* * * * *", tags={}), now=0)
    protocol.tick(125_000)
    assert [p["id"] for p in protocol.snap()["promises"]] == ["s.120000", "s.60000"]


# The sweep (decision D15): first due entry by (kind: promise, retry, lease, schedule; deadline; id),
# re-reading after each transition, no entry twice.


def test_a_promise_timeout_fires_before_a_lease_that_was_due_earlier(protocol):
    # Lease due at 1000, promise at 2000: promise timeouts come first, so the task is fulfilled before its
    # lease can lapse and no execute is ever queued.
    task_create(protocol, targeted("p", timeout_at=2_000), now=0, ttl=1_000)
    protocol.tick(3_000)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "p", "state": "fulfilled", "version": 1, "resumes": 0}]
    assert snap["messages"] == []


def test_a_promise_timeout_fires_before_a_retry_that_was_due_earlier(protocol):
    protocol("promise.create", targeted("p", timeout_at=2_000, tags={"resonate:delay": "1000"}), now=0)
    protocol.tick(3_000)
    snap = protocol.snap()
    assert snap["tasks"] == [{"id": "p", "state": "fulfilled", "version": 0, "resumes": 0}]
    assert snap["messages"] == []


def test_timeouts_made_due_by_a_catch_up_fire_in_the_same_sweep(protocol):
    # Occurrences at 5000, 10000, 15000 each time out 1000 ms later: all of it is past at 17000.
    protocol("schedule.create", schedule(timeout=1_000), now=0)
    protocol.tick(17_000)
    snap = protocol.snap()
    assert [(p["id"], p["state"], p["settledAt"]) for p in snap["promises"]] == [
        ("s.10000", "rejected_timedout", 11_000),
        ("s.15000", "rejected_timedout", 16_000),
        ("s.5000", "rejected_timedout", 6_000),
    ]
    assert [t["state"] for t in snap["tasks"]] == ["fulfilled"] * 3
    assert snap["promiseTimeouts"] == [] and snap["taskTimeouts"] == []


def test_a_catch_up_creates_at_most_its_bound_and_the_schedule_stays_due_for_the_next_sweep(protocol, settings):
    # Deviation from the Lean, which creates every missed occurrence at once: a tick to the year 9999 on an hourly
    # schedule would be about 70 million promises in one request.
    settings.RESONATE = {**settings.RESONATE, "SCHEDULE_CATCH_UP_MAX": 3}
    protocol("schedule.create", schedule(cron="0 * * * *", timeout=10**14), now=0)
    protocol.tick(253402300799000)  # 9999-12-31T23:59:59Z
    assert sorted(p["id"] for p in protocol.snap()["promises"]) == ["s.10800000", "s.3600000", "s.7200000"]
    assert protocol("schedule.get", {"id": "s"}, now=0).data["schedule"]["nextRunAt"] == 14_400_000  # still due
    protocol.tick(253402300799000)
    assert len(protocol.snap()["promises"]) == 6


def test_a_retry_made_due_by_a_catch_up_fires_in_the_same_sweep(protocol):
    protocol("schedule.create", schedule(timeout=60_000), now=0)
    protocol.tick(12_000)
    # s.5000's retry (5000 + 5000) was due at 10000: it fired at 12000 and was re-armed; s.10000's is not due.
    assert timeouts(protocol.snap()) == {"s.10000": (0, 15_000), "s.5000": (0, 17_000)}


def test_schedules_fire_by_deadline_before_id(protocol):
    # Both write the promise "same": the earlier deadline fires first and wins, though its id is larger.
    b = schedule(id="b", cron="*/5 * * * * *", promise_id="same", param={"data": "Yg=="})  # next run 5000
    a = schedule(id="a", cron="*/7 * * * * *", promise_id="same", param={"data": "YQ=="})  # next run 7000
    protocol("schedule.create", b, now=0)
    protocol("schedule.create", a, now=0)
    protocol.tick(8_000)
    [promise] = protocol.snap()["promises"]
    assert (promise["param"], promise["createdAt"]) == ({"data": "Yg=="}, 5_000)


def test_schedules_due_at_the_same_time_fire_by_id(protocol):
    protocol("schedule.create", schedule(id="b", promise_id="same", param={"data": "Yg=="}), now=0)
    protocol("schedule.create", schedule(id="a", promise_id="same", param={"data": "YQ=="}), now=0)
    protocol.tick(5_000)
    [promise] = protocol.snap()["promises"]
    assert promise["param"] == {"data": "YQ=="}


def test_no_entry_fires_twice_in_one_sweep(protocol, settings):
    # With a zero retry timeout a retry re-arms at the tick time itself; the sweep must still end.
    settings.RESONATE = {**settings.RESONATE, "RETRY_TIMEOUT_MS": 0}
    protocol("promise.create", targeted("p"), now=0)
    assert timeouts(protocol.snap()) == {"p": (0, 0)}

    def endless(*_):
        raise TimeoutError("debug.tick did not finish: a timeout fired again and again")

    previous = signal.signal(signal.SIGALRM, endless)
    signal.alarm(20)
    try:
        protocol.tick(100)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    snap = protocol.snap()
    assert timeouts(snap) == {"p": (0, 100)}
    assert snap["messages"] == [execute("p", 0)]
