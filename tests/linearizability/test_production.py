"""Concurrent histories against production mode (PostgreSQL, two server processes, Celery worker and Beat, a Redis
hub) are linearizable against the executable specification and lose no acknowledged write, with and without faults;
and the checker finds no order for the histories of servers with a defect put in on purpose (injected.py).

CI runs a few dozen histories per test. Long sweeps: LINEARIZABILITY_HISTORIES=1000 (histories per test),
LINEARIZABILITY_OPS (requests per client, 12 by default), LINEARIZABILITY_STOP_AFTER (violations before a run stops,
3 by default), LINEARIZABILITY_DEFECTS (no-row-locks,no-version-check), e.g.

    LINEARIZABILITY_HISTORIES=1000 LINEARIZABILITY_STOP_AFTER=1000000 \
        DATABASE_URL=postgres://postgres@127.0.0.1:5432/resonate_lin \
        .venv/bin/pytest -p no:cacheprovider tests/linearizability/test_production.py
"""

import os
import re
import urllib.request
import uuid

import pytest

from tests.linearizability.checker import check, explain, shrink
from tests.linearizability.conftest import EXCERPTS, RESULTS
from tests.linearizability.sweep import Faults, run_sweep
from tests.linearizability.workload import LATER, NOW, PARAMS, TARGET, KeySpace, Runner, envelope

pytestmark = pytest.mark.postgres

HISTORIES = int(os.environ.get("LINEARIZABILITY_HISTORIES", "0"))
OPS = int(os.environ.get("LINEARIZABILITY_OPS", "12"))
STOP_AFTER = int(os.environ.get("LINEARIZABILITY_STOP_AFTER", "3"))  # violations before a run stops (sweeps: more)
DEFECTS = os.environ.get("LINEARIZABILITY_DEFECTS", "no-row-locks,no-version-check").split(",")
CLIENTS = 8
DELAY_MS = 100  # PostgreSQL's added latency each way in the reproductions that need requests to meet


def test_concurrent_histories_are_linearizable_and_lose_no_acknowledged_write(deployment, tmp_path):
    """Eight clients race on promises, tasks, callbacks and schedules; every reply must fit one order of the ops,
    and the final reads must show every write that was acknowledged."""
    marks = deployment.log_marks()

    found = run_sweep("clean", deployment, HISTORIES or 15, tmp_path, CLIENTS, OPS, stop_after=STOP_AFTER)

    RESULTS.append(found.row())
    assert_clean(found, deployment, marks)


def test_creates_that_meet_in_one_server_process_go_in_one_statement_and_stay_linearizable(deployment):
    """Twelve clients create the same eight ids at once, each id by one or two of them with a param of its own,
    through one server process while every round trip to PostgreSQL takes 2 * SLOW_MS longer: the creates meet
    there, and go in one statement (floor.batching). Their replies must fit one order (each id created once, every
    reply showing the param of its creator) and the final reads must show them all."""
    marks, before = deployment.log_marks(), committed_together(deployment)
    for attempt in range(3):
        space = KeySpace(f"meet{attempt}-{uuid.uuid4().hex[:6]}")
        ids = space.all_promises()
        steps = []
        for n in range(12):
            id, param = ids[n % len(ids)], PARAMS[n % len(PARAMS)]
            data = {"id": id, "timeoutAt": LATER, "param": param, "tags": {"resonate:target": TARGET}}
            if n % 4 == 3:  # task.create's first step writes by the same path, a shape of its own
                action = envelope("promise.create", data)
                steps.append((0, f"c{n}", "task.create", {"pid": f"c{n}", "ttl": 60_000, "action": action}))
            else:
                steps.append((0, f"c{n}", "promise.create", data))
        with deployment.slow_database(SLOW_MS):
            history = Runner(deployment.urls[:1]).script(space.prefix, steps)
        assert_linearizable(history.ops)
    assert_clean_run(deployment, marks)
    together = committed_together(deployment) - before
    assert together >= 4, f"{together} creates went in one statement with others': the path went untested"


SLOW_MS = 20


def committed_together(deployment):
    """Creates whose rows went in one statement with other requests' (floor.batching), over both servers."""
    total = 0.0
    for url in deployment.urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
            text = response.read().decode()
        found = re.search(r"^resonate_requests_committed_together_total (\S+)$", text, re.MULTILINE)
        total += float(found.group(1)) if found else 0.0
    return total


def test_they_stay_so_while_server_processes_are_killed_and_database_connections_dropped(deployment, tmp_path):
    """The same under faults, one at a time at random moments: a request cut off by one has no known outcome (it
    may have taken effect, later, or not at all), and every reply that did come back must still fit."""
    marks = deployment.log_marks()

    with Faults(deployment, seed=tmp_path.name) as faults:
        found = run_sweep(
            "faults", deployment, HISTORIES or 20, tmp_path, CLIENTS, OPS, faults=faults, stop_after=STOP_AFTER
        )

    RESULTS.append(found.row())
    assert faults.errors == []
    assert found.faults["kill -9 a server process"] and found.faults["PostgreSQL connections dropped"], found.faults
    assert_clean(found, deployment, marks)


def test_branched_histories_are_linearizable_but_for_their_preload(deployment, tmp_path):
    """Branched histories: the workflows and children share a resonate:branch, so every task.create, task.acquire,
    fence and suspend (300) reply carries the others' records as preload (decision D6), which is a cache read after
    the task's own change, not part of what must be linearizable (checker.agrees says why)."""
    marks = deployment.log_marks()

    found = run_sweep(
        "preload", deployment, HISTORIES or 8, tmp_path, CLIENTS, OPS, stop_after=STOP_AFTER, branched=True
    )

    RESULTS.append(found.row())
    assert_clean(found, deployment, marks)


def test_a_task_read_shows_its_task_and_its_promise_as_they_were_at_one_instant(deployment):
    """A task.get runs while the task is acquired again (version 2) and its promise then settled: it may show the
    task pending at version 1 (before both) or fulfilled at version 2 (after both), never fulfilled at version 1."""
    marks = deployment.log_marks()
    for attempt in range(3):
        space = KeySpace(f"get{attempt}-{uuid.uuid4().hex[:6]}")
        t = space.tasks[0]
        runner = Runner(deployment.urls[:1])
        setup = [
            (0, "setup", "promise.create", {"id": t, "timeoutAt": LATER, "tags": {"resonate:target": TARGET}}),
            (0, "setup", "task.acquire", {"id": t, "version": 0, "pid": "a", "ttl": 60_000}),
            (0, "setup", "task.release", {"id": t, "version": 1}),
            *((0, f"warm{n}", "promise.get", {"id": t}) for n in range(8)),  # every server thread connected
        ]
        before = runner.script(space.prefix, setup)
        delay = DELAY_MS / 1000
        race = [
            (0, "reader", "task.get", {"id": t}),
            (0.2 * delay, "worker", "task.acquire", {"id": t, "version": 1, "pid": "b", "ttl": 60_000}),
            (0.4 * delay, "settler", "promise.settle", {"id": t, "state": "resolved", "value": {}}),
        ]
        with deployment.slow_database(DELAY_MS):
            during = runner.script(space.prefix, race)
        assert_linearizable(before.ops + during.ops)
    assert_clean_run(deployment, marks)


def assert_linearizable(ops):
    outcome = check(ops)
    assert outcome.linearizable, "\n\n".join(explain(shrink(part)) for part in outcome.violations)


@pytest.mark.parametrize("defect", DEFECTS)
def test_the_checker_finds_no_order_for_servers_with_a_defect(deployment, defect, tmp_path):
    """Last in the module: a defect leaves rows that break the invariants, which the tests above check."""
    with deployment.serving_with(defect):
        found = run_sweep(defect, deployment, 60, tmp_path, CLIENTS, OPS, stop_after=1)

    RESULTS.append(found.row())
    assert found.violations, f"{found.histories} histories of servers with {defect!r}: the checker found no violation"
    EXCERPTS.append(found.violations[0])


def assert_clean(found, deployment, marks):
    """Every history linearizable, nothing acknowledged lost, no 5xx but 503, no traceback, every invariant held."""
    assert found.server_errors == []
    assert found.lost == []
    assert found.undecided == []
    assert not found.violations, "\n\n".join(found.violations)
    assert_clean_run(deployment, marks)


def assert_clean_run(deployment, marks):
    """No traceback and no 5xx but 503 in any log since `marks`, and `manage.py invariants` finds nothing."""
    assert deployment.log_problems(since=marks) == []
    assert deployment.invariant_violations(NOW) == ""
