"""T-05 task.heartbeat: renews the leases a pid holds on live promises, skips the rest (E1: empty list = all)."""

from tests.conftest import action, create, targeted


def start(protocol, id, now=0, pid="w", ttl=1_000, timeout_at=10_000):
    protocol("promise.create", targeted(id, timeout_at), now=now)
    answer = protocol("task.acquire", {"id": id, "version": 0, "pid": pid, "ttl": ttl}, now=now)
    assert answer.status == 200


def heartbeat(protocol, pid, tasks, now):
    answer = protocol("task.heartbeat", {"pid": pid, "tasks": tasks}, now=now)
    assert answer.status == 200
    assert answer.data == {}
    return answer


def leases(protocol):
    return {t["id"]: (t["type"], t["timeout"]) for t in protocol.snap()["taskTimeouts"]}


# T-05:7-9 — an unknown task is skipped.


def test_it_skips_an_unknown_task(protocol):
    start(protocol, "p", now=0)
    heartbeat(protocol, "w", [{"id": "nope", "version": 1}, {"id": "p", "version": 1}], now=500)
    assert leases(protocol) == {"p": (1, 1_500)}


# T-05:11-16 — acquired, same version, same pid, live promise: the lease moves to now + the stored ttl.


def test_it_renews_the_lease_of_a_task_the_pid_holds(protocol):
    start(protocol, "p", now=0, ttl=1_000)
    heartbeat(protocol, "w", [{"id": "p", "version": 1}], now=700)
    assert leases(protocol) == {"p": (1, 1_700)}
    task = protocol("task.get", {"id": "p"}, now=701).data["task"]
    assert task == {"id": "p", "state": "acquired", "version": 1, "resumes": 0, "ttl": 1_000, "pid": "w"}


def test_a_renewed_lease_does_not_lapse_at_its_old_deadline(protocol):
    start(protocol, "p", now=0, ttl=1_000)
    heartbeat(protocol, "w", [{"id": "p", "version": 1}], now=900)
    protocol.tick(1_000)
    assert protocol("task.get", {"id": "p"}, now=1_000).data["task"]["state"] == "acquired"
    protocol.tick(1_900)
    assert protocol("task.get", {"id": "p"}, now=1_900).data["task"]["state"] == "pending"


def test_it_renews_several_tasks_in_one_request(protocol):
    start(protocol, "a", now=0)
    start(protocol, "b.1", now=0)
    heartbeat(protocol, "w", [{"id": "a", "version": 1}, {"id": "b.1", "version": 1}], now=300)
    assert leases(protocol) == {"a": (1, 1_300), "b.1": (1, 1_300)}


# T-05:11 — the guard: any of state, version or pid differing skips the entry.


def test_it_skips_a_task_listed_at_another_version(protocol):
    start(protocol, "p", now=0)
    heartbeat(protocol, "w", [{"id": "p", "version": 0}], now=500)
    assert leases(protocol) == {"p": (1, 1_000)}


def test_it_skips_a_task_held_by_another_pid(protocol):
    start(protocol, "p", now=0, pid="w1")
    heartbeat(protocol, "w2", [{"id": "p", "version": 1}], now=500)
    assert leases(protocol) == {"p": (1, 1_000)}


def test_it_skips_a_task_that_is_not_acquired(protocol):
    protocol("promise.create", targeted("p"), now=0)
    heartbeat(protocol, "w", [{"id": "p", "version": 0}], now=500)
    assert leases(protocol) == {"p": (0, 5_000)}  # still the retry timeout
    assert protocol.snap()["tasks"][0]["state"] == "pending"


def test_it_skips_a_suspended_task(protocol):
    start(protocol, "p", now=0)
    protocol("promise.create", create("a"), now=0)
    protocol(
        "task.suspend",
        {"id": "p", "version": 1, "actions": [action("promise.register_callback", {"awaited": "a", "awaiter": "p"})]},
        now=1,
    )
    heartbeat(protocol, "w", [{"id": "p", "version": 1}], now=500)
    assert leases(protocol) == {}


# T-05:14 — the task's promise is past its deadline: no renewal.


def test_it_skips_a_task_whose_promise_has_expired(protocol):
    start(protocol, "p", now=0, ttl=1_000, timeout_at=500)
    heartbeat(protocol, "w", [{"id": "p", "version": 1}], now=500)
    assert leases(protocol) == {"p": (1, 1_000)}


def test_it_skips_a_task_whose_promise_is_settled(protocol):
    start(protocol, "p", now=0)
    protocol("promise.settle", {"id": "p", "state": "resolved"}, now=1)
    heartbeat(protocol, "w", [{"id": "p", "version": 1}], now=500)
    assert leases(protocol) == {}


# Extension E1 (decision D10): an empty list renews every acquired task of the pid whose promise is live.


def test_an_empty_list_renews_every_live_task_the_pid_holds(protocol):
    start(protocol, "a", now=0, pid="w", ttl=1_000)
    start(protocol, "b", now=0, pid="w", ttl=2_000)
    start(protocol, "c", now=0, pid="other", ttl=1_000)
    start(protocol, "d", now=0, pid="w", ttl=1_000, timeout_at=400)
    protocol("promise.create", targeted("e"), now=0)  # pending: nothing to renew
    heartbeat(protocol, "w", [], now=400)
    assert leases(protocol) == {
        "a": (1, 1_400),
        "b": (1, 2_400),
        "c": (1, 1_000),
        "d": (1, 1_000),
        "e": (0, 5_000),
    }


def test_an_empty_list_from_an_unknown_pid_changes_nothing(protocol):
    start(protocol, "a", now=0)
    before = protocol.snap()
    heartbeat(protocol, "nobody", [], now=100)
    assert protocol.snap() == before
