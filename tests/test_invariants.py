"""manage.py invariants: clean on what the protocol writes, and every invariant reports a row injected to break it.

Setup goes through the protocol (envelope.perform) at explicit times long past; the command runs at the wall
clock. The invariants are the catalogue's single-state properties that hold at 83d64c3 (spec/02-abstract/
properties.lean in the specification's later history) and the server's own; --help accounts for all 45.
"""

from io import StringIO

import orjson
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from floor.clock import now_ms
from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_site.management.commands.invariants import TABLES
from resonate_site.protocol.debug import debug_snap
from resonate_site.protocol.envelope import Refusal, perform
from schedules.models import Schedule
from tasks.models import Task, TimeoutKind
from tests.conformance.invariants import violations
from tests.conformance.test_conformance import Conformance
from timeouts.sweep import sweep

pytestmark = pytest.mark.django_db

FAR = 4_102_444_800_000  # 2100-01-01: a deadline no test reaches
LONG_AGO = 1_000  # setup time
SWEPT = 70_000  # when busy_database's timeouts and its schedule fired
TARGET = "poll://any@default"
LISTENER = "poll://uni@default/w"
A_DAY_AHEAD = now_ms() + 86_400_000

# The 45 single-state properties of the catalogue (HEAD:spec/02-abstract/properties.lean): `.state` entries.
CATALOGUE = [
    "well_formed_promise_created_at_lte_timeout_at",
    "well_formed_promise_pending_created_before_deadline",
    "well_formed_promise_settled_at_lte_timeout_at",
    "well_formed_promise_created_at_lte_settled_at",
    "well_formed_promise_settled_at_iff_not_pending",
    "well_formed_promise_pending_has_no_value",
    "well_formed_promise_deadline_verdict_matches_timer_tag",
    "well_formed_promise_deadline_settlement_has_no_value",
    "well_formed_promise_timer_not_targeted",
    "well_formed_promise_timedout_is_server_owned",
    "well_formed_promise_callbacks_unique",
    "well_formed_promise_listeners_unique",
    "well_formed_promise_obligations_require_external",
    "well_formed_promise_awaiter_is_not_self",
    "well_formed_promise_created_at_lte_now",
    "well_formed_promise_settled_at_lte_now",
    "well_formed_task_acquired_iff_has_pid",
    "well_formed_task_acquired_iff_has_ttl",
    "well_formed_task_acquired_iff_has_expires_at",
    "well_formed_task_pending_iff_has_retry_at",
    "well_formed_task_fulfilled_is_cleared",
    "well_formed_task_suspended_is_cleared",
    "well_formed_task_halted_is_cleared",
    "well_formed_task_suspended_has_no_resumes",
    "well_formed_task_resumes_unique",
    "well_formed_task_acquired_version_positive",
    "well_formed_schedule_promise_tags_not_timer_targeted",
    "well_formed_schedule_created_at_lte_next_run_at",
    "well_formed_schedule_created_at_lte_last_run_at",
    "well_formed_schedule_last_run_at_lt_next_run_at",
    "well_formed_store_promise_ids_unique",
    "well_formed_store_task_ids_unique",
    "well_formed_store_schedule_ids_unique",
    "well_formed_store_outbox_keys_unique",
    "consistent_task_iff_targeted_promise",
    "consistent_settled_promise_has_fulfilled_task",
    "consistent_callback_awaiter_is_targeted",
    "consistent_listener_addresses_deliverable",
    "consistent_outbox_execute_names_existing_task",
    "consistent_outbox_never_ahead",
    "consistent_outbox_execute_address_is_target_tag",
    "consistent_outbox_unblock_names_settled_promise",
    "consistent_outbox_unblock_address_deliverable",
    "consistent_settled_task_promise_settled",
    "consistent_suspended_task_holds_rung",
]


def run(*args):
    """Run invariants; (stdout, whether it failed)."""
    out = StringIO()
    try:
        call_command("invariants", *args, stdout=out, stderr=StringIO())
    except CommandError as error:
        assert "invariant(s) of the protocol state" in str(error)
        return out.getvalue(), True
    return out.getvalue(), False


def reported(out):
    """{"table: invariant [name]": [rows]} from the text report."""
    found, rows = {}, None
    for line in out.splitlines():
        if line.startswith("  "):
            rows.append(line.strip())
        else:
            rows = found.setdefault(line.rsplit("; violated by", 1)[0], [])
    return found


def call(kind, data, now=LONG_AGO):
    status, reply = perform(kind, data, now)
    assert status in (200, 300), (kind, data, reply)
    return reply


def create(id, timeout_at=FAR, tags=None, now=LONG_AGO):
    return call("promise.create", {"id": id, "timeoutAt": timeout_at, "tags": tags or {}}, now)


def acquire(id, version=0):
    call("task.acquire", {"id": id, "version": version, "pid": "w", "ttl": 10**9})


def task_create(id, tags=None):
    """task.create of a new promise: a task acquired by w, whatever the promise's tags."""
    action = {"kind": "promise.create", "data": {"id": id, "timeoutAt": FAR, "tags": tags or {}}}
    call("task.create", {"pid": "w", "ttl": 10**9, "action": action})


def busy_database():
    """A little of everything, through the protocol: every state of a task, promises settled by hand and by their
    deadline, a callback, a listener, resumes, a schedule that ran, executes and an unblock."""
    create("wf", tags={"resonate:target": TARGET})
    create("wf.1", tags={"resonate:target": TARGET})  # its task stays pending
    acquire("wf")
    awaits = {"kind": "promise.register_callback", "data": {"awaited": "wf.1", "awaiter": "wf"}}
    call("task.suspend", {"id": "wf", "version": 1, "actions": [awaits]})
    call("promise.register_listener", {"awaited": "wf.1", "address": LISTENER})
    create("job", tags={"resonate:target": TARGET})
    acquire("job")
    create("halted", tags={"resonate:target": TARGET})
    call("task.halt", {"id": "halted"})
    create("parent", tags={"resonate:target": TARGET})
    acquire("parent")
    create("child")
    call("promise.register_callback", {"awaited": "child", "awaiter": "parent"})
    call("promise.settle", {"id": "child", "state": "resolved"}, LONG_AGO + 1)  # parent's resumes: child
    create("heard")
    call("promise.register_listener", {"awaited": "heard", "address": LISTENER})
    call("promise.settle", {"id": "heard", "state": "resolved"}, LONG_AGO + 1)  # an unblock
    create("done", tags={"resonate:target": TARGET})
    call("promise.settle", {"id": "done", "state": "resolved"}, LONG_AGO + 1)
    create("timer", timeout_at=LONG_AGO + 10, tags={"resonate:timer": "true"})
    create("late", timeout_at=LONG_AGO + 20, tags={"resonate:external": "true"})
    task_create("solo")  # a task for an untargeted promise
    schedule = {"id": "s", "cron": "* * * * *", "promiseId": "s.{{.timestamp}}", "promiseTimeout": 1}
    call("schedule.create", schedule)
    sweep(SWEPT)  # the timer resolves, late times out, wf.1's execute goes again, s runs (s.60000)


def promises(id, **fields):
    return lambda: Promise.objects.filter(pk=id).update(**fields)


def tasks(id, **fields):
    return lambda: Task.objects.filter(pk=id).update(**fields)


def schedule(**fields):
    return lambda: Schedule.objects.filter(pk="s").update(**fields)


def message(message_key, **fields):
    return lambda: Message.objects.filter(key=message_key).update(**fields)


def added(model, **fields):
    """A row added as it is; removed again when it refers to a row that does not exist (the foreign keys are
    checked as the test ends)."""

    def add():
        row = model.objects.create(**fields)
        return row.delete

    return add


def unblock(**changes):
    """The unblock of `heard` changed: its record (as `changes` say) or its address."""

    def change():
        found = Message.objects.get(kind="unblock")
        found.data = {"promise": {**found.data["promise"], **changes.pop("record", {})}}
        for field, value in changes.items():
            setattr(found, field, value)
        found.save()

    return change


def unknown_execute():
    data = {"task": {"id": "ghost", "version": 0}}
    Message.objects.create(key="e:ghost", kind="execute", subject="ghost", address=TARGET, data=data, created_at=1)


# (table, the catalogue's name or the server's own sentence) -> (the damage, the row reported)
DAMAGE = {
    ("promises", "its state is a promise state"): (promises("child", state="lost"), "promise child"),
    ("promises", "its tags are an object of strings"): (promises("timer", tags=["resonate:timer"]), "promise timer"),
    ("promises", "well_formed_promise_created_at_lte_timeout_at"): (
        promises("s.60000", created_at=60_002),
        "promise s.60000",
    ),
    ("promises", "well_formed_promise_pending_created_before_deadline"): (
        promises("s.60000", created_at=F("timeout_at")),
        "promise s.60000",
    ),
    ("promises", "well_formed_promise_settled_at_lte_timeout_at"): (
        promises("late", settled_at=LONG_AGO + 21),
        "promise late",
    ),
    ("promises", "well_formed_promise_created_at_lte_settled_at"): (
        promises("child", settled_at=LONG_AGO - 1),
        "promise child",
    ),
    ("promises", "well_formed_promise_settled_at_iff_not_pending"): (promises("done", settled_at=None), "promise done"),
    ("promises", "well_formed_promise_pending_has_no_value"): (
        promises("wf.1", value={"data": "eA=="}),
        "promise wf.1",
    ),
    ("promises", "well_formed_promise_deadline_verdict_matches_timer_tag"): (
        promises("timer", state="rejected_timedout"),
        "promise timer",
    ),
    ("promises", "well_formed_promise_deadline_settlement_has_no_value"): (
        promises("late", value={"headers": {"k": "v"}}),
        "promise late",
    ),
    ("promises", "well_formed_promise_timedout_is_server_owned"): (
        promises("child", state="rejected_timedout"),
        "promise child",
    ),
    ("promises", "well_formed_promise_created_at_lte_now"): (
        promises("wf.1", created_at=A_DAY_AHEAD),
        "promise wf.1",
    ),
    ("promises", "well_formed_promise_settled_at_lte_now"): (promises("done", settled_at=A_DAY_AHEAD), "promise done"),
    ("promises", "consistent_task_iff_targeted_promise"): (
        lambda: Task.objects.filter(pk="wf.1").delete(),
        "promise wf.1",
    ),
    ("promises", "only a pending promise has an armed timeout"): (promises("done", timeout_armed=True), "promise done"),
    ("promises", "a pending external promise has an armed timeout"): (
        promises("wf.1", timeout_armed=False),
        "promise wf.1",
    ),
    ("promises", "a pending promise with a task has an armed timeout"): (
        promises("solo", timeout_armed=False),
        "promise solo",
    ),
    ("promises", "its timer and branch columns copy its tags"): (promises("timer", timer=False), "promise timer"),
    ("tasks", "its state is a task state"): (tasks("job", state="lost"), "task job"),
    ("tasks", "it has its promise"): (added(Task, promise_id="ghost"), "task ghost"),
    ("tasks", "consistent_settled_task_promise_settled"): (
        promises("done", state="pending", settled_at=None),
        "task done",
    ),
    ("tasks", "consistent_settled_promise_has_fulfilled_task"): (
        promises("halted", state="resolved", settled_at=LONG_AGO + 1),
        "task halted",
    ),
    ("tasks", "well_formed_task_acquired_iff_has_pid"): (tasks("job", pid=None), "task job"),
    ("tasks", "well_formed_task_acquired_iff_has_ttl"): (tasks("job", ttl=None), "task job"),
    ("tasks", "well_formed_task_acquired_iff_has_expires_at"): (
        tasks("job", timeout_kind=None, timeout_at=None),
        "task job",
    ),
    ("tasks", "well_formed_task_pending_iff_has_retry_at"): (
        tasks("wf.1", timeout_kind=None, timeout_at=None),
        "task wf.1",
    ),
    ("tasks", "its one timeout has both a kind and a time, or neither"): (tasks("wf.1", timeout_at=None), "task wf.1"),
    ("tasks", "well_formed_task_fulfilled_is_cleared"): (tasks("done", resumes=["x"]), "task done"),
    ("tasks", "well_formed_task_suspended_is_cleared"): (tasks("wf", pid="w"), "task wf"),
    ("tasks", "well_formed_task_halted_is_cleared"): (
        tasks("halted", timeout_kind=TimeoutKind.RETRY, timeout_at=FAR),
        "task halted",
    ),
    ("tasks", "well_formed_task_suspended_has_no_resumes"): (tasks("wf", resumes=["wf.1"]), "task wf"),
    ("tasks", "well_formed_task_resumes_unique"): (tasks("parent", resumes=["child", "child"]), "task parent"),
    ("tasks", "its version is not negative"): (tasks("wf.1", version=-1), "task wf.1"),
    ("tasks", "well_formed_task_acquired_version_positive"): (tasks("job", version=0), "task job"),
    ("callbacks", "both its promises exist"): (
        added(Callback, awaited_id="wf.1", awaiter_id="ghost"),
        "callback ghost awaits wf.1",
    ),
    ("callbacks", "its awaited promise is pending (settling it takes its callbacks)"): (
        added(Callback, awaited_id="done", awaiter_id="job"),
        "callback job awaits done",
    ),
    ("callbacks", "its awaiter is pending (the settlement scrub)"): (
        added(Callback, awaited_id="wf.1", awaiter_id="done"),
        "callback done awaits wf.1",
    ),
    ("callbacks", "its awaiter has a task to resume"): (
        added(Callback, awaited_id="wf.1", awaiter_id="heard"),
        "callback heard awaits wf.1",
    ),
    ("listeners", "its promise exists"): (
        added(Listener, promise_id="ghost", address=LISTENER),
        f"listener {LISTENER} on ghost",
    ),
    ("listeners", "its promise is pending (settling it takes its listeners)"): (
        added(Listener, promise_id="done", address=LISTENER),
        f"listener {LISTENER} on done",
    ),
    ("listeners", "consistent_listener_addresses_deliverable"): (
        added(Listener, promise_id="wf.1", address="mailto:w@example.com"),
        "listener mailto:w@example.com on wf.1",
    ),
    ("schedules", "its cron is valid"): (schedule(cron="every minute"), "schedule s"),
    ("schedules", "its promise timeout is not negative"): (schedule(promise_timeout=-1), "schedule s"),
    ("schedules", "well_formed_schedule_created_at_lte_next_run_at"): (
        schedule(created_at=F("next_run_at") + 1),
        "schedule s",
    ),
    ("schedules", "well_formed_schedule_created_at_lte_last_run_at"): (
        schedule(created_at=F("last_run_at") + 1),
        "schedule s",
    ),
    ("schedules", "well_formed_schedule_last_run_at_lt_next_run_at"): (schedule(last_run_at=FAR), "schedule s"),
    ("messages", "its key is made of its kind, subject and address"): (
        message("e:wf.1", key="e:elsewhere"),
        "message e:elsewhere",
    ),
    ("messages", "its kind and delivery state are known"): (message("e:job", state="lost"), "message e:job"),
    ("messages", "it carries its subject: an execute its task's id and a version, an unblock its promise's record"): (
        message("e:job", data={"task": {"id": "wf", "version": 0}}),
        "message e:job",
    ),
    ("messages", "consistent_outbox_execute_names_existing_task"): (unknown_execute, "message e:ghost"),
    ("messages", "consistent_outbox_never_ahead"): (
        message("e:job", data={"task": {"id": "job", "version": 2}}),
        "message e:job",
    ),
    ("messages", "consistent_outbox_execute_address_is_target_tag"): (
        message("e:job", address="poll://any@elsewhere"),
        "message e:job",
    ),
    ("messages", "consistent_outbox_unblock_names_settled_promise"): (
        unblock(record={"state": "pending"}),
        "message u:5:heardpoll://uni@default/w",
    ),
    ("messages", "consistent_outbox_unblock_address_deliverable"): (
        unblock(address="mailto:w@example.com"),
        "message u:5:heardpoll://uni@default/w",
    ),
}


def test_every_invariant_has_a_test_that_breaks_it():
    checked = {(table.name, invariant.name or invariant.sentence) for table in TABLES for invariant in table.invariants}
    assert checked == set(DAMAGE)


def test_invariants_hold_on_what_the_protocol_writes():
    busy_database()
    out, failed = run()
    assert (out, failed) == ("Invariants hold over 29 rows.\n", False)


@pytest.mark.parametrize(("table", "invariant"), DAMAGE, ids=[f"{t}: {i}" for t, i in DAMAGE])
def test_invariants_report_an_injected_violation_and_fail(table, invariant):
    busy_database()
    damage, row = DAMAGE[(table, invariant)]
    undo = damage()
    try:
        out, failed = run()
    finally:
        if callable(undo):
            undo()
    found = [
        rows
        for line, rows in reported(out).items()
        if line == f"{table}: {invariant}" or (line.startswith(f"{table}: ") and line.endswith(f" [{invariant}]"))
    ]
    assert failed and len(found) == 1 and row in found[0], out


def test_a_violation_names_the_catalogues_property():
    busy_database()
    Task.objects.filter(pk="job").update(version=0)
    out, _ = run()
    assert (
        "tasks: an acquired task's version is at least 1 [well_formed_task_acquired_version_positive];"
        " violated by 1 (listed):\n  task job\n"
    ) in out


def test_the_clock_relative_invariants_are_read_at_now():
    busy_database()
    assert run("--now", str(SWEPT))[1] is False
    out, failed = run("--now", "59999")  # before the schedule's run at 60000 created s.60000
    assert failed
    assert reported(out)["promises: it was created no later than now [well_formed_promise_created_at_lte_now]"] == [
        "promise s.60000"
    ]


def test_invariants_report_violations_as_json():
    busy_database()
    Task.objects.filter(pk="wf").update(resumes=["wf.1"])
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("invariants", "--json", stdout=out, stderr=StringIO())
    assert orjson.loads(out.getvalue()) == {
        "checked": 29,
        "violations": [
            {
                "table": "tasks",
                "invariant": "a suspended task has no resumes",
                "property": "well_formed_task_suspended_has_no_resumes",
                "count": 1,
                "rows": ["task wf"],
            }
        ],
    }


def test_rows_are_read_a_batch_at_a_time_and_each_once():
    busy_database()
    Task.objects.filter(pk="job").update(version=0)
    with CaptureQueriesContext(connection) as queries:
        out, failed = run("--batch", "2")
    assert failed and "task job" in out
    assert len(queries) < 40  # 29 rows, 2 a query: a query per batch and a count per table, none per row


def test_help_accounts_for_every_state_property_of_the_catalogue(capsys):
    with pytest.raises(SystemExit):
        call_command("invariants", "--help")
    shown = capsys.readouterr().out
    assert len(CATALOGUE) == 45
    checked, rest = shown.split("\nenforced by the schema, not read again:\n")
    schema, broken = rest.split("\nnot checked: the specification at 83d64c3 breaks them on purpose:\n")
    named = {
        "checked": {name for name in CATALOGUE if f"[{name}]" in checked},
        "schema": {name for name in CATALOGUE if f"  {name}: " in schema},
        "broken": {name for name in CATALOGUE if f"  {name}: " in broken or f"  {name} (" in broken},
    }
    assert named["checked"] | named["schema"] | named["broken"] == set(CATALOGUE)
    assert named["checked"] & named["broken"] == {"consistent_task_iff_targeted_promise"}  # in halves
    assert not named["schema"] & (named["checked"] | named["broken"])
    assert (len(named["checked"]), len(named["schema"]), len(named["broken"])) == (33, 6, 7)


def test_what_83d64c3_breaks_on_purpose_is_reachable_and_not_reported():
    create("wf", tags={"resonate:target": TARGET})
    create("internal")
    create("both", tags={"resonate:timer": "true", "resonate:target": TARGET})  # well_formed_promise_timer_not_targeted
    call("promise.register_listener", {"awaited": "internal", "address": LISTENER})  # ..._obligations_require_external
    call("promise.register_callback", {"awaited": "internal", "awaiter": "wf"})
    call("promise.register_callback", {"awaited": "wf", "awaiter": "wf"})  # well_formed_promise_awaiter_is_not_self
    timer_targeted = {"resonate:timer": "true", "resonate:target": TARGET}
    nightly = {"id": "s", "cron": "* * * * *", "promiseId": "s.{{.timestamp}}", "promiseTimeout": 1}
    call("schedule.create", {**nightly, "promiseTags": timer_targeted})  # ..._schedule_promise_tags_not_timer_targeted
    for id in ("loose", "idle"):  # consistent_task_iff_targeted_promise: tasks of untargeted promises
        task_create(id)
    awaits = {"kind": "promise.register_callback", "data": {"awaited": "internal", "awaiter": "loose"}}
    call("task.suspend", {"id": "loose", "version": 1, "actions": [awaits]})  # consistent_callback_awaiter_is_targeted
    call("task.suspend", {"id": "idle", "version": 1, "actions": []})  # consistent_suspended_task_holds_rung

    assert Promise.objects.get(pk="both").timeout_armed and Task.objects.filter(pk="both").exists()
    assert Listener.objects.filter(promise_id="internal").exists()
    assert set(Callback.objects.values_list("awaited_id", "awaiter_id")) == {
        ("internal", "wf"),
        ("wf", "wf"),
        ("internal", "loose"),
    }
    assert Schedule.objects.get(pk="s").promise_tags == timer_targeted
    assert dict(Task.objects.filter(pk__in=["loose", "idle"]).values_list("pk", "state")) == {
        "loose": "suspended",
        "idle": "suspended",
    }
    assert run() == ("Invariants hold over 16 rows.\n", False)


@pytest.mark.parametrize("address", ["HTTP://example.com/hook", "Https://example.com/hook", "POLL://any@g"])
def test_a_listener_address_the_catalogue_calls_undeliverable_is_refused_at_the_door(address):
    """The catalogue's addressValid reads the scheme as written (lower case); urlsplit lowers it."""
    create("p")
    with pytest.raises(Refusal, match="lower case") as refused:
        perform("promise.register_listener", {"awaited": "p", "address": address}, LONG_AGO)
    assert refused.value.status == 400


# The same properties on a debug.snap (tests/conformance/invariants.py, run after every conformance step).


def promise_of(snap, id):
    return next(p for p in snap["promises"] if p["id"] == id)


def task_of(snap, id):
    return next(t for t in snap["tasks"] if t["id"] == id)


def message_of(snap, kind, subject):
    return next(
        m
        for m in snap["messages"]
        if m["message"]["kind"] == kind
        and (m["message"]["data"].get("task") or m["message"]["data"].get("promise"))["id"] == subject
    )


def repeated(snap, part, n=0):
    snap[part].append(dict(snap[part][n]))


def without_timeout(snap, id):
    snap["taskTimeouts"] = [t for t in snap["taskTimeouts"] if t["id"] != id]


def without_task(snap, id):
    snap["tasks"] = [t for t in snap["tasks"] if t["id"] != id]
    without_timeout(snap, id)


def unsettled(promise):
    promise.update(state="pending")
    del promise["settledAt"]


def settled_by_hand(promise):
    promise.update(state="resolved", settledAt=LONG_AGO + 1)


def ghost_execute(snap):
    data = {"task": {"id": "ghost", "version": 0}}
    snap["messages"].append({"address": TARGET, "message": {"kind": "execute", "head": {}, "data": data}})


SNAP_DAMAGE = {
    "well_formed_promise_created_at_lte_timeout_at": lambda s: promise_of(s, "s.60000").update(createdAt=60_002),
    "well_formed_promise_pending_created_before_deadline": lambda s: promise_of(s, "s.60000").update(createdAt=60_001),
    "well_formed_promise_settled_at_lte_timeout_at": lambda s: promise_of(s, "late").update(settledAt=LONG_AGO + 21),
    "well_formed_promise_created_at_lte_settled_at": lambda s: promise_of(s, "child").update(settledAt=LONG_AGO - 1),
    "well_formed_promise_settled_at_iff_not_pending": lambda s: promise_of(s, "done").pop("settledAt"),
    "well_formed_promise_pending_has_no_value": lambda s: promise_of(s, "wf.1").update(value={"data": "eA=="}),
    "well_formed_promise_deadline_verdict_matches_timer_tag": lambda s: promise_of(s, "timer").update(
        state="rejected_timedout"
    ),
    "well_formed_promise_deadline_settlement_has_no_value": lambda s: promise_of(s, "late").update(
        value={"headers": {"k": "v"}}
    ),
    "well_formed_promise_timedout_is_server_owned": lambda s: promise_of(s, "child").update(state="rejected_timedout"),
    "well_formed_promise_created_at_lte_now": lambda s: promise_of(s, "wf.1").update(createdAt=SWEPT + 1),
    "well_formed_promise_settled_at_lte_now": lambda s: promise_of(s, "done").update(settledAt=SWEPT + 1),
    "well_formed_promise_callbacks_unique": lambda s: repeated(s, "callbacks"),
    "well_formed_promise_listeners_unique": lambda s: repeated(s, "listeners"),
    "well_formed_store_promise_ids_unique": lambda s: repeated(s, "promises"),
    "well_formed_store_task_ids_unique": lambda s: repeated(s, "tasks"),
    "well_formed_store_outbox_keys_unique": lambda s: repeated(s, "messages"),
    "well_formed_task_acquired_iff_has_pid": lambda s: task_of(s, "job").pop("pid"),
    "well_formed_task_acquired_iff_has_ttl": lambda s: task_of(s, "job").pop("ttl"),
    "well_formed_task_acquired_iff_has_expires_at": lambda s: without_timeout(s, "job"),
    "well_formed_task_pending_iff_has_retry_at": lambda s: without_timeout(s, "wf.1"),
    "well_formed_task_fulfilled_is_cleared": lambda s: task_of(s, "done").update(resumes=1),
    "well_formed_task_suspended_is_cleared": lambda s: task_of(s, "wf").update(pid="w"),
    "well_formed_task_halted_is_cleared": lambda s: task_of(s, "halted").update(ttl=5),
    "well_formed_task_suspended_has_no_resumes": lambda s: task_of(s, "wf").update(resumes=1),
    "well_formed_task_acquired_version_positive": lambda s: task_of(s, "job").update(version=0),
    "consistent_task_iff_targeted_promise": lambda s: without_task(s, "wf.1"),
    "consistent_settled_promise_has_fulfilled_task": lambda s: settled_by_hand(promise_of(s, "halted")),
    "consistent_settled_task_promise_settled": lambda s: unsettled(promise_of(s, "done")),
    "consistent_listener_addresses_deliverable": lambda s: s["listeners"][0].update(address="mailto:w@example.com"),
    "consistent_outbox_execute_names_existing_task": ghost_execute,
    "consistent_outbox_never_ahead": lambda s: message_of(s, "execute", "job")["message"]["data"]["task"].update(
        version=2
    ),
    "consistent_outbox_execute_address_is_target_tag": lambda s: message_of(s, "execute", "job").update(
        address="poll://any@elsewhere"
    ),
    "consistent_outbox_unblock_names_settled_promise": lambda s: message_of(s, "unblock", "heard")["message"]["data"][
        "promise"
    ].update(state="pending"),
    "consistent_outbox_unblock_address_deliverable": lambda s: message_of(s, "unblock", "heard").update(
        address="mailto:w@example.com"
    ),
}


def test_the_snapshot_checks_hold_on_what_the_protocol_writes():
    busy_database()
    assert violations(debug_snap({}, 0).data, {}, now=SWEPT) == []


@pytest.mark.parametrize("name", SNAP_DAMAGE)
def test_the_snapshot_checks_report_a_broken_snapshot_by_the_catalogues_name(name):
    busy_database()
    snap = debug_snap({}, 0).data
    SNAP_DAMAGE[name](snap)
    problems = violations(snap, {}, now=SWEPT)
    assert [problem for problem in problems if problem.startswith(f"{name}: ")], problems


class ConformanceThenInvariants(Conformance):
    """The conformance state machine's random histories, then invariants over the rows they left."""

    runs = 0

    def teardown(self):
        out, failed = run("--now", str(self.now))
        assert not failed, out
        type(self).runs += 1


def test_invariants_hold_after_random_histories_of_the_protocol(protocol):
    ConformanceThenInvariants.protocol = protocol
    run_state_machine_as_test(
        ConformanceThenInvariants,
        settings=settings(
            max_examples=20 if connection.vendor == "sqlite" else 10,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
    assert ConformanceThenInvariants.runs >= 10


def test_djangos_check_reads_no_rows():
    """Deploy tooling runs `check` on every start: it must not scan a large database."""
    busy_database()
    Task.objects.filter(pk="wf").update(version=-1)
    out = StringIO()
    with CaptureQueriesContext(connection) as queries:
        call_command("check", stdout=out)
    assert out.getvalue() == "System check identified no issues (0 silenced).\n"
    assert not [query for query in queries if "tasks_task" in query["sql"]]


def test_invariants_refuse_an_unmigrated_database(monkeypatch):
    monkeypatch.setattr(connection.introspection, "table_names", lambda *args, **kwargs: [])
    with pytest.raises(CommandError, match="not migrated"):
        call_command("invariants", stdout=StringIO(), stderr=StringIO())
