"""Requests answered together (floor.transactions.run_together, the embedded mode's group commit): one BEGIN and one
COMMIT for all, each request's operation in a savepoint, each answered only with what was committed."""

import functools

import orjson
import pytest
from django.db import OperationalError, connection
from prometheus_client import REGISTRY

from floor import rows, transactions
from floor.counters import flush
from floor.sqlite3 import base as sqlite_backend
from outbox.models import Message
from promises.models import Promise
from resonate_site.protocol.envelope import respond

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]

FAR = 4102444800000


def body(kind, **data):
    return orjson.dumps({"kind": kind, "head": {"corrId": kind, "version": "2026-04-01"}, "data": data})


def create(id, target=None):
    tags = {"resonate:target": target} if target else {}
    return functools.partial(respond, body("promise.create", id=id, timeoutAt=FAR, param={}, tags=tags))


def get(id):
    return functools.partial(respond, body("promise.get", id=id))


def statuses(results):
    return [status for status, _ in results]


def failing_after_writing(id, monkeypatch):
    """promise.create of `id` fails with a bug once its promise, task and message are written."""
    insert = rows.insert_unless_exists

    def failing(instance, dependents=(), using="default"):
        found = insert(instance, dependents, using)
        if instance.pk == id:
            raise RuntimeError("a bug, after the promise and its task were written")
        return found

    monkeypatch.setattr(rows, "insert_unless_exists", failing)


def committed_together():
    flush()  # counts are folded into the series at a flush (floor.counters)
    return REGISTRY.get_sample_value("resonate_requests_committed_together_total") or 0.0


def writer_locked():
    return sqlite_backend._writer.locked()


@pytest.fixture
def commits(monkeypatch):
    counted = []
    commit = sqlite_backend.DatabaseWrapper._commit

    def counting(self):
        counted.append(self.in_atomic_block)
        return commit(self)

    monkeypatch.setattr(sqlite_backend.DatabaseWrapper, "_commit", counting)
    return counted


def test_requests_answered_together_share_one_commit_and_each_gets_its_own_answer(commits):
    before = committed_together()

    results = transactions.run_together([create("a", "poll://any@w"), create("b"), get("a"), get("nowhere")])

    assert statuses(results) == [200, 200, 200, 404]  # the get sees the create before it: one order of the four
    assert len(commits) == 1
    assert set(Promise.objects.values_list("id", flat=True)) == {"a", "b"}
    assert Message.objects.filter(subject="a").count() == 1  # its task's execute, with it
    assert committed_together() - before == 4


def test_a_request_that_fails_midway_is_undone_alone_and_the_others_commit(monkeypatch, commits):
    failing_after_writing("boom", monkeypatch)

    results = transactions.run_together([create("a"), create("boom", "poll://any@w"), create("c")])

    assert statuses(results) == [200, 500, 200]
    assert set(Promise.objects.values_list("id", flat=True)) == {"a", "c"}
    assert not Message.objects.filter(subject="boom").exists()  # its task's message went with it
    assert len(commits) == 1
    assert not connection.needs_rollback and not connection.in_atomic_block


def test_a_lost_race_is_run_again_within_its_savepoint(monkeypatch, commits):
    insert, lost = rows.insert_unless_exists, []

    def losing_once(instance, dependents=(), using="default"):
        found = insert(instance, dependents, using)
        if instance.pk == "raced" and not lost:
            lost.append(True)
            raise OperationalError("database is locked")  # what transactions.lost_race retries
        return found

    monkeypatch.setattr(rows, "insert_unless_exists", losing_once)

    results = transactions.run_together([create("raced", "poll://any@w"), create("other")])

    assert statuses(results) == [200, 200] and lost == [True]
    assert Promise.objects.filter(id="raced").count() == 1
    assert Message.objects.filter(subject="raced").count() == 1  # the first run's writes were undone
    assert len(commits) == 1


def test_when_the_shared_commit_fails_each_request_runs_again_alone_and_is_answered_with_its_own_commit(
    monkeypatch, commits
):
    commit, failed = sqlite_backend.DatabaseWrapper._commit, []

    def failing_first(self):
        if not failed:
            failed.append(True)
            raise OperationalError("disk I/O error")
        return commit(self)

    monkeypatch.setattr(sqlite_backend.DatabaseWrapper, "_commit", failing_first)

    results = transactions.run_together([create("a"), create("b"), get("a")])

    assert statuses(results) == [200, 200, 200]
    assert orjson.loads(results[0][1])["data"]["promise"]["id"] == "a"
    assert set(Promise.objects.values_list("id", flat=True)) == {"a", "b"}
    assert len(commits) == 3  # one for each request alone (the shared one failed before it was counted)
    assert not sqlite_backend._writer.locked()


def test_an_operation_that_leaves_its_transaction_marked_for_rollback_breaks_the_batch_into_single_requests(
    monkeypatch, commits
):
    insert, marked = rows.insert_unless_exists, []

    def marking_once(instance, dependents=(), using="default"):
        found = insert(instance, dependents, using)
        if instance.pk == "marks" and not marked:
            marked.append(True)
            connection.needs_rollback = True  # as Django does when an error inside an atomic block was swallowed
        return found

    monkeypatch.setattr(rows, "insert_unless_exists", marking_once)

    results = transactions.run_together([create("a"), create("marks"), create("c")])

    assert statuses(results) == [200, 200, 200]  # run again alone: the mark came once
    assert set(Promise.objects.values_list("id", flat=True)) == {"a", "marks", "c"}
    assert len(commits) == 3  # the batch was rolled back, never committed; then one commit per request


def test_one_call_alone_runs_as_it_would_outside_a_batch(commits):
    before = committed_together()

    assert statuses(transactions.run_together([create("alone")])) == [200]

    assert len(commits) == 1 and committed_together() == before


def test_the_messages_of_a_whole_batch_reach_the_deliverer_in_one_notice_after_the_commit(monkeypatch):
    from outbox import dispatch

    notified = []
    monkeypatch.setattr(dispatch, "notify", lambda messages: notified.append((messages, writer_locked())))
    failing_after_writing("boom", monkeypatch)

    results = transactions.run_together(
        [create("a", "poll://any@w"), create("boom", "poll://any@w"), create("c", "poll://any@w")]
    )

    assert statuses(results) == [200, 500, 200]
    assert [([m.subject for m in messages], locked) for messages, locked in notified] == [(["a", "c"], False)]
