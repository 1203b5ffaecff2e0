"""The management commands: promises, invoke, tasks, schedules, tree, sweep, deliver and prune (invariants:
tests/test_invariants.py).

Setup goes through the protocol (envelope.perform) at explicit times long past, or with deadlines far
in the future; the commands themselves run at the wall clock. Bad input must be a CommandError that
writes nothing.
"""

import base64
from io import StringIO

import orjson
import pytest
from django.core.management import CommandError, call_command

from floor.clock import now_ms
from outbox.models import DeliveryState, Message, Pause
from promises.models import Callback, Listener, Promise
from resonate_site.management.cli import duration, moment
from resonate_site.protocol.debug import debug_snap
from resonate_site.protocol.envelope import perform
from schedules.models import Schedule
from tasks.models import Task, TimeoutKind

pytestmark = pytest.mark.django_db

FAR = 4_102_444_800_000  # 2100-01-01: a deadline no test reaches
LONG_AGO = 1_000  # setup time of promises meant to be old
TARGET = "poll://any@default"


def run(*args):
    """Run a command; (stdout, stderr)."""
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def run_json(*args):
    return orjson.loads(run(*args, "--json")[0])


def snap():
    return debug_snap({}, 0).data


def fails(*args):
    """The CommandError message of a command that must fail without writing anything."""
    before = snap()
    with pytest.raises(CommandError) as error:
        run(*args)
    assert snap() == before
    return str(error.value)


def create(id, timeout_at=FAR, tags=None, now=LONG_AGO, **data):
    return perform("promise.create", {"id": id, "timeoutAt": timeout_at, "tags": tags or {}, **data}, now)[1]


def settle(id, state="resolved", now=LONG_AGO + 1):
    return perform("promise.settle", {"id": id, "state": state}, now)[1]


def decoded(data):
    return orjson.loads(base64.b64decode(data))


# Arguments


def test_durations_have_units_or_are_milliseconds():
    assert duration("1h30m") == 5_400_000
    assert duration("500ms") == 500
    assert duration("2d") == 172_800_000
    assert duration("250") == 250


def test_times_are_timestamps_iso_dates_or_durations_ago():
    assert moment("1767225600000") == 1_767_225_600_000
    assert moment("2026-01-01") == 1_767_225_600_000
    assert moment("2026-01-01T01:00:00+01:00") == 1_767_225_600_000
    assert abs(moment("1h") - (now_ms() - 3_600_000)) < 5_000


# promises


def test_promises_create_makes_a_pending_promise_with_base64_json_data_and_tags():
    reply = run_json("promises", "create", "p1", "--timeout", "1h", "--data", '{"x": 1}', "--tags", '{"k": "v"}')
    promise = reply["promise"]
    assert promise["state"] == "pending"
    assert decoded(promise["param"]["data"]) == {"x": 1}
    assert promise["tags"] == {"k": "v"}
    assert promise["timeoutAt"] - promise["createdAt"] == 3_600_000
    assert Promise.objects.get(pk="p1").param == promise["param"]


def test_promises_get_shows_times_in_iso_and_data_decoded():
    create("p1", timeout_at=1_767_225_600_000, param={"data": base64.b64encode(b'{"x":1}').decode()})
    out, _ = run("promises", "get", "p1")
    assert "timeoutAt  2026-01-01T00:00:00.000Z (1767225600000)" in out
    assert 'param      {"data":{"x":1}}' in out


@pytest.mark.parametrize(
    ("action", "state"), [("resolve", "resolved"), ("reject", "rejected"), ("cancel", "rejected_canceled")]
)
def test_promises_settle_a_pending_promise(action, state):
    create("p1")
    promise = run_json("promises", action, "p1", "--data", '"done"')["promise"]
    assert promise["state"] == state
    assert decoded(promise["value"]["data"]) == "done"
    assert Promise.objects.get(pk="p1").state == state


def test_settling_a_settled_promise_changes_nothing_and_says_so():
    create("p1")
    settle("p1", "rejected")
    out, err = run("promises", "resolve", "p1")
    assert "already settled" in err
    assert Promise.objects.get(pk="p1").state == "rejected"


def test_promises_search_filters_by_state_and_tags_and_pages_with_a_cursor():
    for id in ("a", "b", "c"):
        create(id, tags={"team": "x"})
    create("d", tags={"team": "y"})
    settle("b")
    first = run_json("promises", "search", "--tags", '{"team": "x"}', "--limit", "1")
    assert [p["id"] for p in first["promises"]] == ["a"]
    rest = run_json("promises", "search", "--tags", '{"team": "x"}', "--cursor", first["cursor"])
    assert [p["id"] for p in rest["promises"]] == ["b", "c"]
    assert "cursor" not in rest
    resolved = run_json("promises", "search", "--state", "resolved")
    assert [p["id"] for p in resolved["promises"]] == ["b"]


def test_promises_search_prints_a_table_and_the_next_cursor():
    create("a")
    create("b")
    out, _ = run("promises", "search", "--limit", "1")
    assert out.splitlines() == ["id  state    timeoutAt", "a   pending  2100-01-01T00:00:00.000Z", "more: --cursor a"]


def test_a_missing_promise_is_a_command_error():
    assert fails("promises", "get", "nope") == "Promise not found: nope (promise.get answered 404)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["promises", "create", "p", "--timeout", "1x"], "'1x' is not a duration"),
        (["promises", "create", "p"], "--timeout"),
        (["promises", "create", "p", "--timeout", "1h", "--data", "{oops"], "not valid JSON"),
        (["promises", "create", "p", "--timeout", "1h", "--tags", "[1]"], "must be a JSON object"),
        (["promises", "create", "p", "--timeout", "1h", "--tags", '{"k": 1}'], "tags: must be an object"),
        (["promises", "create", "p", "--timeout", "1h", "--tags", '{"resonate:target": "ftp://x"}'], "resonate:target"),
        (["promises", "search", "--limit", "0"], "limit: must be between 1 and 1000"),
        (["promises", "search", "--state", "lost"], "invalid choice"),
        (["promises", "resolve", "nope"], "Promise not found"),
    ],
)
def test_bad_promise_input_is_a_command_error_that_writes_nothing(args, message):
    create("existing")
    assert message in fails(*args)


# invoke


def test_invoke_creates_a_targeted_promise_whose_param_names_the_function():
    promise = run_json("invoke", "wf-1", "--func", "greet", "--arg", "42", "--arg", "bob", "--arg", '"7"')["promise"]
    assert decoded(promise["param"]["data"]) == {"func": "greet", "args": [42, "bob", "7"], "version": 1}
    assert promise["tags"] == {"resonate:target": TARGET}
    assert promise["timeoutAt"] - promise["createdAt"] == 3_600_000
    assert Task.objects.get(pk="wf-1").state == "pending"
    assert Message.objects.get(subject="wf-1").address == TARGET


def test_invoke_with_a_delay_tags_the_absolute_start_and_holds_the_execute_until_then():
    args = ["--json-args", '[1, {"a": 2}]', "--version", "3", "--timeout", "10m", "--delay", "5s", "--target", "gpu"]
    promise = run_json("invoke", "wf-2", "-f", "train", *args)["promise"]
    start = promise["createdAt"] + 5_000
    assert decoded(promise["param"]["data"]) == {"func": "train", "args": [1, {"a": 2}], "version": 3}
    assert promise["tags"] == {"resonate:target": "poll://any@gpu", "resonate:delay": str(start)}
    assert promise["timeoutAt"] == start + 600_000
    task = Task.objects.get(pk="wf-2")
    assert (task.timeout_kind, task.timeout_at) == (TimeoutKind.RETRY, start)
    assert not Message.objects.exists()


def test_invoking_an_existing_id_changes_nothing():
    create("wf-1", tags={"resonate:target": TARGET})
    before = snap()
    _, err = run("invoke", "wf-1", "-f", "other")
    assert "already exists" in err
    assert snap() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["invoke", "wf", "-f", "f", "--target", "ftp://nowhere"], "resonate:target"),
        (["invoke", "wf", "-f", "f", "--arg", "1", "--json-args", "[1]"], "not allowed with argument"),
        (["invoke", "wf", "-f", "f", "--json-args", '{"a": 1}'], "must be a JSON array"),
        (["invoke", "wf"], "--func"),
    ],
)
def test_bad_invoke_input_is_a_command_error_that_writes_nothing(args, message):
    assert message in fails(*args)


# tasks


def test_tasks_get_halt_continue_and_search():
    create("wf", tags={"resonate:target": TARGET})
    assert run_json("tasks", "get", "wf")["task"] == {"id": "wf", "state": "pending", "version": 0, "resumes": 0}
    out, _ = run("tasks", "halt", "wf")
    assert out == "Task wf halted: not dispatched until `tasks continue`.\n"
    assert Task.objects.get(pk="wf").state == "halted"
    assert [t["id"] for t in run_json("tasks", "search", "--state", "halted")["tasks"]] == ["wf"]
    run("tasks", "continue", "wf")
    assert Task.objects.get(pk="wf").state == "pending"
    assert run_json("tasks", "search", "--state", "halted")["tasks"] == []


def test_a_task_conflict_is_a_command_error_that_writes_nothing():
    create("wf", tags={"resonate:target": TARGET})
    settle("wf")
    assert fails("tasks", "halt", "wf") == "Task is fulfilled: wf (task.halt answered 409)"
    assert "Task is not halted" in fails("tasks", "continue", "wf")
    assert "Task not found" in fails("tasks", "get", "nope")


# schedules


def test_schedules_create_get_search_and_delete():
    args = ["--cron", "0 2 * * *", "--promise-id", "{{.id}}.{{.timestamp}}", "--promise-timeout", "1h"]
    tags = '{"resonate:target": "poll://any@default"}'
    schedule = run_json("schedules", "create", "nightly", *args, "--promise-data", "[1]", "--promise-tags", tags)
    assert schedule["schedule"]["promiseTimeout"] == 3_600_000
    assert decoded(schedule["schedule"]["promiseParam"]["data"]) == [1]
    assert schedule["schedule"]["nextRunAt"] % 86_400_000 == 7_200_000
    assert run_json("schedules", "get", "nightly") == schedule
    assert [s["id"] for s in run_json("schedules", "search", "--tags", tags)["schedules"]] == ["nightly"]
    run("schedules", "delete", "nightly")
    assert not Schedule.objects.exists()


def test_bad_schedule_input_is_a_command_error_that_writes_nothing():
    args = ["--promise-id", "x", "--promise-timeout", "1h"]
    assert "invalid cron expression" in fails("schedules", "create", "s", "--cron", "every day", *args)
    assert "Schedule not found" in fails("schedules", "delete", "s")


# tree


def call_tree():
    """wf → wf.1 (→ wf.1.1), wf.2, created in that order; plus a promise of another workflow."""
    create("wf", tags={"resonate:target": TARGET})
    for n, (id, parent) in enumerate([("wf.1", "wf"), ("wf.1.1", "wf.1"), ("wf.2", "wf")]):
        create(id, tags={"resonate:origin": "wf", "resonate:parent": parent}, now=LONG_AGO + n)
    create("other.1", tags={"resonate:origin": "other", "resonate:parent": "other"})
    settle("wf.1.1", "rejected", now=LONG_AGO + 10)
    settle("wf.1", now=LONG_AGO + 11)


def test_tree_prints_the_call_tree_with_states():
    call_tree()
    out, err = run("tree", "wf")
    assert out.splitlines() == [
        "wf  pending",
        "├── wf.1  resolved",
        "│   └── wf.1.1  rejected",
        "└── wf.2  pending",
    ]
    assert err == ""


def test_tree_as_json_nests_children_and_pages_with_a_progress_bar():
    call_tree()
    out, err = run("tree", "wf", "--json", "--progress")
    assert orjson.loads(out) == {
        "id": "wf",
        "state": "pending",
        "children": [
            {"id": "wf.1", "state": "resolved", "children": [{"id": "wf.1.1", "state": "rejected", "children": []}]},
            {"id": "wf.2", "state": "pending", "children": []},
        ],
    }
    assert "3 promises" in err


def test_tree_of_a_missing_promise_is_a_command_error():
    assert "Promise not found" in fails("tree", "nope")


# sweep and deliver


def test_sweep_fires_due_timeouts():
    create("wf", timeout_at=LONG_AGO + 10, tags={"resonate:target": TARGET})
    assert run_json("sweep") == {"fired": 1}
    assert Promise.objects.get(pk="wf").state == "rejected_timedout"
    assert Task.objects.get(pk="wf").state == "fulfilled"
    assert run("sweep")[0] == "Fired 0 timeout transitions.\n"


def test_sweep_does_nothing_while_paused():
    create("wf", timeout_at=LONG_AGO + 10, tags={"resonate:target": TARGET})
    Pause.set(True)
    out, err = run("sweep")
    assert "paused" in err
    assert Promise.objects.get(pk="wf").state == "pending"


@pytest.mark.django_db(transaction=True)  # the loop closes stale connections between sweeps, as in production
def test_sweep_loop_keeps_sweeping_until_it_is_told_to_stop():
    create("wf", timeout_at=LONG_AGO + 10, tags={"resonate:target": TARGET})
    assert run("sweep", "--loop", "--stop-after", "200ms")[0] == "Fired 1 timeout transition.\n"
    assert Promise.objects.get(pk="wf").state == "rejected_timedout"


def test_a_sweep_with_nothing_due_starts_no_transaction(monkeypatch):
    """Each category's sweep is a transaction, which takes SQLite's one writer: with nothing due there is none."""
    from timeouts import sweeper

    create("later", timeout_at=now_ms() + 60_000, now=now_ms())  # no target: no task, whose retry would be due
    monkeypatch.setattr(sweeper, "sweep", lambda *args, **kwargs: pytest.fail("swept with nothing due"))
    fired, wait = sweeper.sweep_once(idle=0.05)
    assert fired == 0 and 0.005 <= wait <= 0.05
    monkeypatch.undo()
    create("due", timeout_at=LONG_AGO + 10, tags={"resonate:target": TARGET})
    assert sweeper.sweep_once(idle=0.05)[0] == 1
    assert Promise.objects.get(pk="due").state == "rejected_timedout"


def test_deliver_attempts_due_messages_once():
    create("wf", tags={"resonate:target": "http://127.0.0.1:9/unreachable"})
    assert run_json("deliver") == {"attempted": 1}
    message = Message.objects.get(subject="wf")
    assert (message.attempts, message.state) == (1, DeliveryState.PENDING)
    assert message.last_error
    assert run("deliver")[0] == "Attempted 0 messages.\n"  # the retry is not due yet


def test_deliver_without_a_hub_leaves_poll_messages_to_the_server_that_holds_the_streams():
    create("wf", tags={"resonate:target": TARGET})
    out, err = run("deliver")
    assert out == "Attempted 0 messages.\n" and "poll://" in err
    message = Message.objects.get(subject="wf")
    assert (message.attempts, message.state) == (0, DeliveryState.PENDING)


@pytest.mark.django_db(transaction=True)
def test_deliver_loop_stops_after_its_time():
    create("wf", tags={"resonate:target": "http://127.0.0.1:9/unreachable"})
    assert run_json("deliver", "--loop", "--stop-after", "100ms") == {"attempted": 1}


# prune


def old_settled(id, **tags):
    create(id, tags=tags)
    settle(id)


def test_prune_deletes_old_settled_promises_with_their_task_callbacks_listeners_and_messages():
    create("wf", tags={"resonate:target": TARGET})
    perform("promise.register_listener", {"awaited": "wf", "address": "poll://uni@default/w"}, LONG_AGO)
    settle("wf")
    Message.objects.update(state=DeliveryState.DELIVERED)
    create("other", tags={"resonate:target": TARGET})
    Callback.objects.create(awaited_id="wf", awaiter_id="other")  # rows the settlement would have removed
    Listener.objects.create(promise_id="wf", address="poll://uni@default/x")
    report = run_json("prune", "--settled-before", "1d")
    assert report["deleted"] == {"promises": 1, "tasks": 1, "callbacks": 1, "listeners": 1, "messages": 2}
    assert not Promise.objects.filter(pk="wf").exists()
    assert not Task.objects.filter(pk="wf").exists()
    assert not Message.objects.filter(subject="wf").exists()
    assert Task.objects.filter(pk="other").exists()
    assert Message.objects.filter(subject="other").exists()


def test_prune_never_deletes_a_pending_promise_even_one_that_reads_as_timed_out():
    create("expired", timeout_at=LONG_AGO + 10)
    create("expired-armed", timeout_at=LONG_AGO + 10, tags={"resonate:target": TARGET})
    create("live")
    assert perform("promise.get", {"id": "expired"})[1]["promise"]["state"] == "rejected_timedout"
    before = snap()
    out, _ = run("prune", "--settled-before", "2100-01-01")
    assert out.startswith("Pruned 0 promises")
    assert snap() == before


def test_prune_keeps_promises_settled_after_the_cutoff():
    old_settled("old")
    create("recent")
    settle("recent", now=LONG_AGO + 5_000)
    run("prune", "--settled-before", str(LONG_AGO + 5_000))
    assert list(Promise.objects.values_list("id", flat=True)) == ["recent"]


def test_prune_keeps_the_settled_children_of_a_running_workflow():
    create("wf", tags={"resonate:target": TARGET})
    old_settled("wf.1", **{"resonate:origin": "wf"})
    old_settled("done.1", **{"resonate:origin": "done"})
    Message.objects.update(state=DeliveryState.DELIVERED)
    report = run_json("prune", "--settled-before", "1d")
    assert (report["deleted"]["promises"], report["kept"]) == (1, 1)
    assert sorted(Promise.objects.values_list("id", flat=True)) == ["wf", "wf.1"]


def test_prune_keeps_a_promise_whose_message_still_awaits_delivery():
    create("wf")
    perform("promise.register_listener", {"awaited": "wf", "address": "poll://uni@default/w"}, LONG_AGO)
    settle("wf")
    assert run_json("prune", "--settled-before", "1d")["kept"] == 1
    assert Promise.objects.filter(pk="wf").exists()


def test_prune_works_in_batches_and_dry_run_deletes_nothing():
    for id in ("a", "b", "c"):
        old_settled(id)
    before = snap()
    out, _ = run("prune", "--settled-before", "1d", "--dry-run")
    assert out.startswith("Would prune 3 promises settled before")
    assert snap() == before
    out, err = run("prune", "--settled-before", "1d", "--batch", "1", "--progress")
    assert out.startswith("Pruned 3 promises")
    assert "3/3" in err
    assert not Promise.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--settled-before"),
        (["--settled-before", "last tuesday"], "is not a time"),
        (["--settled-before", "1d", "--batch", "0"], "at least 1"),
    ],
)
def test_bad_prune_input_is_a_command_error_that_deletes_nothing(args, message):
    old_settled("old")
    assert message in fails("prune", *args)


@pytest.mark.parametrize(
    ("settings_", "said"),
    [
        ({}, "production mode needs RESONATE_AUTH_PUBLIC_KEY_FILE"),
        ({"RESONATE_AUTH_PUBLIC_KEY_FILE": "/no/such/key.pem"}, "No such file or directory"),
        ({"RESONATE_AUTH_DISABLED": "true", "DATABASE_URL": "postgres://u:pw@h:port/db"}, "DATABASE_URL"),
        ({"RESONATE_AUTH_DISABLED": "true", "RESONATE_HUB_URL": ""}, "RESONATE_HUB_URL"),
    ],
)
def test_bin_production_refuses_to_start_on_a_configuration_error_and_says_why(tmp_path, settings_, said):
    """Not a supervisord restarting a server that cannot start, with the reason only in var/run/server.log."""
    import os
    import subprocess

    from tests.e2e.servers import ROOT, runtime_python

    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith(("RESONATE_", "DATABASE_"))},
        "RESONATE_PYTHON": runtime_python(),
        "RESONATE_RUN_DIR": str(tmp_path),
        "RESONATE_HUB_URL": "redis://127.0.0.1:6379/5",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/5",
        **settings_,
    }
    started = subprocess.run(["bin/production"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 1
    assert said in started.stderr
    assert "bin/production: not started" in started.stderr
    assert "pw" not in started.stderr
    assert not (tmp_path / "supervisord.pid").exists()
