"""The server against the executable specification: random request sequences sent to POST / and to the
model, with time moved by `resonate:debug_time` and `debug.tick`; every status, every returned record
and the whole stored state (debug.snap) must agree after every step.

More steps on demand: CONFORMANCE_EXAMPLES=2000 CONFORMANCE_STEPS=100 pytest tests/conformance
"""

import copy
import os

from django.db import connection
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tests.conformance.invariants import violations
from tests.conformance.model import SpecModel
from timeouts.sweep import sweep

IDS = ["a", "a.1", "a.2", "b", "b.1"]
PIDS = ["w1", "w2"]
ADDRESSES = ["poll://any@g", "poll://uni@g/w1", "http://localhost:9/hook"]
TARGET = "poll://any@g"
SCHEDULE_IDS = ["s1", "s2"]
START = 1_000_000

ids = st.sampled_from(IDS)
pids = st.sampled_from(PIDS)
ttls = st.sampled_from([0, 1000, 5000, 30000])
deadlines = st.integers(-500, 20_000)  # timeoutAt relative to now
values = st.sampled_from([{}, {"data": "eA=="}, {"headers": {"k": "v"}, "data": "eQ=="}])
settle_states = st.sampled_from(["resolved", "rejected", "rejected_canceled"])
tag_sets = st.sampled_from(
    [
        {},
        {"resonate:target": TARGET},
        {"resonate:target": TARGET, "resonate:branch": "a"},
        {"resonate:target": "poll://uni@g/w2", "resonate:branch": "b"},
        {"resonate:timer": "true"},
        {"resonate:timer": "true", "resonate:branch": "a"},
        {"resonate:external": "true", "resonate:branch": "a"},
        {"resonate:branch": "b"},
    ]
)
delays = st.one_of(st.none(), st.integers(-1000, 15_000))
promise_states = st.sampled_from(["pending", "resolved", "rejected", "rejected_canceled", "rejected_timedout"])
task_states = st.sampled_from(["pending", "acquired", "suspended", "halted", "fulfilled"])
limits = st.integers(1, 4)
crons = st.sampled_from(["*/5 * * * * *", "*/7 * * * * *", "0 * * * * *", "* * * * *"])
templates = st.sampled_from(["{{.id}}.{{.timestamp}}", "fixed-{{.id}}"])


class Conformance(RuleBasedStateMachine):
    protocol = None  # set by the test: the POST / client

    def __init__(self):
        super().__init__()
        self.model = SpecModel()
        self.now = START
        self.versions = {}
        assert self.protocol("debug.reset", {}).status == 200

    def send(self, kind, data):
        expected_status, expected = self.model.handle(kind, copy.deepcopy(data), self.now, corr_id="conf")
        answer = self.protocol(kind, data, now=self.now, head={"corrId": "conf"})
        assert answer.status == expected_status, (kind, data, answer.data, expected)
        if expected_status < 400:
            assert answer.data == expected, (kind, data)
        return answer

    def version_of(self, data, task_id):
        """Mostly the task's current version (to reach the success paths), sometimes a stale or wrong one."""
        task = self.model.tasks.get(task_id)
        current = task.version if task else 0
        return data.draw(st.sampled_from([current, current, current, max(current - 1, 0), current + 1]))

    # time

    @rule(dt=st.integers(0, 3000))
    def advance(self, dt):
        self.now += dt

    @rule(dt=st.integers(0, 12_000))
    def tick(self, dt):
        self.now += dt
        self.model.tick(self.now)
        self.protocol.tick(self.now)

    # promise.*

    @rule(id=ids)
    def promise_get(self, id):
        self.send("promise.get", {"id": id})

    @rule(id=ids, deadline=deadlines, tags=tag_sets, param=values, delay=delays)
    def promise_create(self, id, deadline, tags, param, delay):
        tags = dict(tags)
        if delay is not None and "resonate:target" in tags:
            tags["resonate:delay"] = str(max(self.now + delay, 0))
        self.send("promise.create", {"id": id, "timeoutAt": self.now + deadline, "param": param, "tags": tags})

    @rule(id=ids, state=settle_states, value=values)
    def promise_settle(self, id, state, value):
        self.send("promise.settle", {"id": id, "state": state, "value": value})

    @rule(awaited=ids, awaiter=ids)
    def promise_register_callback(self, awaited, awaiter):
        self.send("promise.register_callback", {"awaited": awaited, "awaiter": awaiter})

    @rule(awaited=ids, address=st.sampled_from(ADDRESSES))
    def promise_register_listener(self, awaited, address):
        self.send("promise.register_listener", {"awaited": awaited, "address": address})

    @rule(
        state=st.none() | promise_states,
        branch=st.none() | st.sampled_from(["a", "b"]),
        limit=st.none() | limits,
        cursor=st.none() | ids,
    )
    def promise_search(self, state, branch, limit, cursor):
        data = {}
        if state:
            data["state"] = state
        if branch:
            data["tags"] = {"resonate:branch": branch}
        if limit:
            data["limit"] = limit
        if cursor:
            data["cursor"] = cursor
        self.send("promise.search", data)

    # task.*

    @rule(id=ids)
    def task_get(self, id):
        self.send("task.get", {"id": id})

    @rule(id=ids, pid=pids, ttl=ttls, deadline=deadlines, tags=tag_sets)
    def task_create(self, id, pid, ttl, deadline, tags):
        action = {"id": id, "timeoutAt": self.now + deadline, "tags": tags}
        self.send("task.create", {"pid": pid, "ttl": ttl, "action": envelope("promise.create", action)})

    @rule(data=st.data(), id=ids, pid=pids, ttl=ttls)
    def task_acquire(self, data, id, pid, ttl):
        self.send("task.acquire", {"id": id, "version": self.version_of(data, id), "pid": pid, "ttl": ttl})

    @rule(
        data=st.data(),
        id=ids,
        child=ids,
        deadline=deadlines,
        tags=tag_sets,
        settle=st.booleans(),
        state=settle_states,
        value=values,
    )
    def task_fence(self, data, id, child, deadline, tags, settle, state, value):
        if settle:
            inner = envelope("promise.settle", {"id": child, "state": state, "value": value})
        else:
            inner = envelope("promise.create", {"id": child, "timeoutAt": self.now + deadline, "tags": tags})
        self.send("task.fence", {"id": id, "version": self.version_of(data, id), "action": inner})

    @rule(data=st.data(), pid=pids, refs=st.lists(ids, max_size=3))
    def task_heartbeat(self, data, pid, refs):
        tasks = [{"id": id, "version": self.version_of(data, id)} for id in refs]
        self.send("task.heartbeat", {"pid": pid, "tasks": tasks})

    @rule(data=st.data(), id=ids, awaited=st.lists(ids, max_size=3))
    def task_suspend(self, data, id, awaited):
        actions = [envelope("promise.register_callback", {"awaited": a, "awaiter": id}) for a in awaited]
        self.send("task.suspend", {"id": id, "version": self.version_of(data, id), "actions": actions})

    @rule(data=st.data(), id=ids, state=settle_states, value=values)
    def task_fulfill(self, data, id, state, value):
        inner = envelope("promise.settle", {"id": id, "state": state, "value": value})
        self.send("task.fulfill", {"id": id, "version": self.version_of(data, id), "action": inner})

    @rule(data=st.data(), id=ids)
    def task_release(self, data, id):
        self.send("task.release", {"id": id, "version": self.version_of(data, id)})

    @rule(id=ids)
    def task_halt(self, id):
        self.send("task.halt", {"id": id})

    @rule(id=ids)
    def task_continue(self, id):
        self.send("task.continue", {"id": id})

    @rule(state=st.none() | task_states, limit=st.none() | limits, cursor=st.none() | ids)
    def task_search(self, state, limit, cursor):
        data = {k: v for k, v in {"state": state, "limit": limit, "cursor": cursor}.items() if v is not None}
        self.send("task.search", data)

    # schedule.*

    @rule(
        id=st.sampled_from(SCHEDULE_IDS),
        cron=crons,
        template=templates,
        timeout=st.sampled_from([0, 3000, 20_000]),
        targeted=st.booleans(),
    )
    def schedule_create(self, id, cron, template, timeout, targeted):
        tags = {"resonate:target": TARGET} if targeted else {}
        self.send(
            "schedule.create",
            {
                "id": id,
                "cron": cron,
                "promiseId": template,
                "promiseTimeout": timeout,
                "promiseParam": {"data": "eg=="},
                "promiseTags": tags,
            },
        )

    @rule(id=st.sampled_from(SCHEDULE_IDS))
    def schedule_get(self, id):
        self.send("schedule.get", {"id": id})

    @rule(id=st.sampled_from(SCHEDULE_IDS))
    def schedule_delete(self, id):
        self.send("schedule.delete", {"id": id})

    @rule(limit=st.none() | limits, targeted=st.booleans())
    def schedule_search(self, limit, targeted):
        data = {"tags": {"resonate:target": TARGET}} if targeted else {}
        if limit:
            data["limit"] = limit
        self.send("schedule.search", data)

    # after every step

    @invariant()
    def stored_state_matches_the_model(self):
        snap = self.protocol.snap()
        assert snap == self.model.snap()
        assert violations(snap, self.versions, self.now) == []
        assert self.model.invariant_violations() == []


class BackgroundConformance(Conformance):
    """The same, with ticks run by the background form of the sweep: small batches, each its own
    transaction, entries claimed with SKIP LOCKED. D15 allows batching if the result is the same."""

    @rule(dt=st.integers(0, 12_000))
    def tick(self, dt):
        self.now += dt
        self.model.tick(self.now)
        sweep(self.now, batch=3)


def envelope(kind, data):
    return {"kind": kind, "head": {"corrId": "inner", "version": "2026-04-01"}, "data": data}


def conformance_settings(share=1.0):
    default_examples = 100 if connection.vendor == "sqlite" else 50  # PostgreSQL steps cost twice as much
    return settings(
        max_examples=max(1, int(int(os.environ.get("CONFORMANCE_EXAMPLES", default_examples)) * share)),
        stateful_step_count=int(os.environ.get("CONFORMANCE_STEPS", 60)),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def test_the_server_behaves_as_the_specification(protocol):
    Conformance.protocol = protocol
    run_state_machine_as_test(Conformance, settings=conformance_settings())


def test_the_background_sweep_reaches_the_same_state_as_the_specification(protocol):
    BackgroundConformance.protocol = protocol
    run_state_machine_as_test(BackgroundConformance, settings=conformance_settings(share=0.3))
