"""task.fence answered by one read (tasks.handlers.task_fence_read) gives exactly task_fence's answer.

A replaying workflow re-fences every child it has made, so most fences write nothing; those are answered
from one statement, without a transaction. Here both run on the same states, many of them: the read must
answer precisely the fences that write nothing, and answer them as the transaction does.
"""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from resonate_site.protocol.envelope import answer
from tasks.handlers import task_fence, task_fence_read
from tests.test_database import envelope

TARGET = "poll://any@g"
NOW = 5_000


def request(kind, data, now):
    reply = answer(envelope(kind, data), now)
    return reply["head"]["status"], reply["data"]


@pytest.fixture
def workflow(transactional_db):
    """Tasks in every state a fence meets, children in one branch, and a promise without a task."""
    branch = {"resonate:target": TARGET, "resonate:branch": "root"}
    for id, timeout in (("root", 10**9), ("other", 10**9), ("late", NOW - 1)):
        request("promise.create", {"id": id, "timeoutAt": timeout, "tags": branch}, 1_000)
    for id in ("root", "late"):  # acquired at version 1
        assert request("task.acquire", {"id": id, "version": 0, "pid": "w", "ttl": 10**8}, 1_000)[0] == 200
    for child in ("a", "b"):
        fence = {"kind": "promise.create", "head": {"corrId": "i", "version": "2026-04-01"}}
        fence["data"] = {"id": child, "timeoutAt": 10**9, "tags": {"resonate:branch": "root"}}
        assert request("task.fence", {"id": "root", "version": 1, "action": fence}, 1_000)[0] == 200
    request("promise.create", {"id": "plain", "timeoutAt": 10**9}, 1_000)
    request("promise.settle", {"id": "a", "state": "resolved"}, 2_000)


ids = st.sampled_from(["root", "other", "late", "a", "b", "plain", "new"])
tasks = st.sampled_from(["root"] * 4 + ["late", "other", "plain", "new"])  # mostly the held task


def compare(task, child, version, now):
    """Run both on one fence (the transaction rolled back); the read's status, or None when it left it to the
    transaction. Asserts they agree."""
    data = {"id": child, "timeout_at": 10**9, "param": {}, "tags": {"resonate:branch": "root"}}
    req = {"id": task, "version": version, "corr_id": "c", "action": {"kind": "promise.create", "data": data}}

    read = task_fence_read(req, now)
    with transaction.atomic():
        with CaptureQueriesContext(connection) as fenced:
            full = task_fence(req, now)
        transaction.set_rollback(True)

    wrote = any(not q["sql"].lstrip().upper().startswith("SELECT") for q in fenced.captured_queries)
    assert (read is None) == wrote, (read, full)
    if read is not None:
        assert read == full
    return None if read is None else read.status


@pytest.mark.django_db(transaction=True)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=tasks, child=ids, version=st.sampled_from([1, 1, 0, 2]), now=st.sampled_from([1_500, NOW, 10**9 + 1]))
def test_the_read_answers_what_the_transaction_answers_whenever_nothing_is_written(workflow, task, child, version, now):
    status = compare(task, child, version, now)
    event("the transaction runs" if status is None else f"the read answers {status}")


@pytest.mark.django_db(transaction=True)
def test_the_comparison_meets_every_outcome(workflow):
    """The property's states reach each outcome (else it could pass comparing nothing)."""
    assert compare("root", "b", 1, NOW) == 200  # a replayed child
    assert compare("root", "new", 1, NOW) is None  # a new child: the transaction writes it
    assert compare("root", "b", 2, NOW) == 409  # a stale version
    assert compare("late", "b", 1, NOW) == 409  # its promise has timed out
    assert compare("plain", "b", 1, NOW) == 404  # no task


@pytest.mark.django_db(transaction=True)
def test_a_replayed_fence_is_one_statement(workflow, monkeypatch):
    """One read (on PostgreSQL without BEGIN and COMMIT; SQLite runs every operation in a transaction)."""
    from resonate_site.protocol import dispatch

    unwritten = dispatch.OPERATIONS["task.fence"]._replace(handler=lambda req, now: pytest.fail("task_fence ran"))
    monkeypatch.setitem(dispatch.OPERATIONS, "task.fence", unwritten)
    fence = {"kind": "promise.create", "head": {"corrId": "i", "version": "2026-04-01"}}
    fence["data"] = {"id": "b", "timeoutAt": 10**9, "tags": {"resonate:branch": "root"}}
    with CaptureQueriesContext(connection) as replayed:
        status, data = request("task.fence", {"id": "root", "version": 1, "action": fence}, NOW)

    assert status == 200 and data["action"]["data"]["promise"]["id"] == "b"
    assert [p["id"] for p in data["preload"]] == ["a", "b", "late", "other"]
    statements = [q["sql"] for q in replayed.captured_queries if q["sql"] not in ("BEGIN IMMEDIATE", "COMMIT")]
    assert len(statements) == 1 and statements[0].startswith("SELECT"), statements
