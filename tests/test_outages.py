"""Outages are logged as one line, bugs with their traceback (floor.outages): a traceback in a log means a bug."""

import logging
import sys

import pytest
import redis
from django.db import OperationalError
from kombu.exceptions import OperationalError as BrokerUnreachable

from floor.loops import keep_running
from floor.outages import OutagesInOneLine, is_outage, log_failure
from floor.transactions import Unavailable
from outbox import tasks

log = logging.getLogger("tests.outages")


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("connection to server at 127.0.0.1, port 5432 failed: Connection refused"),
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6390"),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
        BrokerUnreachable("Connection refused"),
        ConnectionResetError(104, "Connection reset by peer"),
        Unavailable("run: connection lost while committing"),
    ],
)
def test_an_outage_is_logged_as_one_line_naming_what_was_out_of_reach(error, caplog):
    assert is_outage(error)
    try:
        raise error
    except Exception:
        log_failure(log, "the sweep failed; trying again")
    (record,) = caplog.records
    assert record.levelname == "WARNING" and record.exc_info is None
    assert record.getMessage().startswith(f"the sweep failed; trying again (out of reach: {type(error).__name__}: ")


@pytest.mark.parametrize("error", [KeyError("id"), TypeError("unhashable"), ValueError("bad")])
def test_anything_else_is_a_bug_logged_with_its_traceback(error, caplog):
    assert not is_outage(error)
    try:
        raise error
    except Exception:
        log_failure(log, "the sweep failed; trying again")
    (record,) = caplog.records
    assert record.levelname == "ERROR" and record.exc_info[1] is error


def test_the_background_loop_logs_an_outage_without_a_traceback_and_goes_on(caplog):
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("the database system is starting up")
        return 1, 0

    assert keep_running(step, 0.05, stopping=lambda: len(calls) >= 3, retry_after=0) == 2
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING"]
    assert all(r.exc_info is None for r in caplog.records)
    assert "step failed; trying again" in caplog.records[0].getMessage()
    assert "step works again, after 1 failures" in caplog.records[1].getMessage()


def test_a_background_step_that_keeps_failing_is_logged_once_in_a_while(caplog):
    calls = []

    def step():
        calls.append(1)
        raise OperationalError("the database system is shutting down")

    keep_running(step, 5, stopping=lambda: len(calls) >= 200, retry_after=0)
    assert len(calls) == 200 and len(caplog.records) == 1


def test_libraries_that_log_an_outage_with_its_traceback_log_one_line(caplog):
    """Celery Beat logs a broker out of reach with its traceback and a formatted stack (settings.LOGGING's filter)."""
    record = logging.LogRecord("celery.beat", logging.ERROR, __file__, 1, "Message Error: %s\n%s", None, None)
    try:
        raise BrokerUnreachable("Error 111 connecting to 127.0.0.1:6390. Connection refused.")
    except BrokerUnreachable as error:
        record.args = (error, ["  File ..."])
        record.exc_info = sys.exc_info()
    assert OutagesInOneLine().filter(record)
    assert record.levelname == "WARNING" and record.exc_info is None
    assert record.getMessage() == (
        "Message Error: Error 111 connecting to 127.0.0.1:6390. Connection refused."
        " (out of reach: OperationalError: Error 111 connecting to 127.0.0.1:6390. Connection refused.)"
    )


def test_an_outage_a_library_wrapped_in_its_own_error_is_one_line_too():
    """Celery Beat raises SchedulingError while handling kombu's OperationalError (the broker out of reach)."""
    from celery.beat import SchedulingError

    record = logging.LogRecord("celery.beat", logging.ERROR, __file__, 1, "Message Error: %s", None, None)
    try:
        try:
            raise BrokerUnreachable("Error 111 connecting to 127.0.0.1:6390. Connection refused.")
        except BrokerUnreachable:
            raise SchedulingError("Couldn't apply scheduled task sweep")  # noqa: B904 (as Celery raises it)
    except SchedulingError as error:
        record.args, record.exc_info = (error,), sys.exc_info()
    assert OutagesInOneLine().filter(record)
    assert record.levelname == "WARNING" and record.exc_info is None
    assert record.getMessage().endswith(
        "(out of reach: OperationalError: Error 111 connecting to 127.0.0.1:6390. Connection refused.)"
    )


def test_a_pool_process_lost_is_one_line_too():
    """A Celery worker logs a pool process killed mid-task as billiard's ExceptionWithTraceback around WorkerLostError
    (the fault suite's 'kill -9 a Celery worker child')."""
    from billiard.einfo import ExceptionWithTraceback
    from billiard.exceptions import WorkerLostError

    lost = ExceptionWithTraceback(WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL) Job: 19."), "tb")
    record = logging.LogRecord(
        "celery.worker.request", logging.ERROR, __file__, 1, "Task handler raised error", None, None
    )
    record.exc_info = (type(lost), lost, None)
    assert OutagesInOneLine().filter(record)
    assert record.levelname == "WARNING" and record.exc_info is None
    assert "out of reach: WorkerLostError: Worker exited prematurely" in record.getMessage()


def test_a_library_s_traceback_of_a_bug_is_kept(caplog):
    record = logging.LogRecord("celery.worker", logging.ERROR, __file__, 1, "Task failed", None, None)
    try:
        raise KeyError("a bug")
    except KeyError:
        record.exc_info = sys.exc_info()
    assert OutagesInOneLine().filter(record)
    assert record.levelname == "ERROR" and record.exc_info is not None


def test_a_celery_wake_up_that_meets_an_outage_logs_one_line_and_ends(monkeypatch, caplog):
    def unreachable():
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(tasks.Pause, "is_paused", unreachable)
    tasks.deliver_due()  # does not raise: Beat sends the next one
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "the delivery pass failed" in record.getMessage()


def test_a_celery_wake_up_that_meets_a_bug_raises_it_for_celery_to_log(monkeypatch):
    def bug():
        raise KeyError("a bug")

    monkeypatch.setattr(tasks.Pause, "is_paused", bug)
    with pytest.raises(KeyError):
        tasks.deliver_due()


def test_beat_s_tick_that_meets_the_database_away_logs_one_line_and_ticks_again_soon(monkeypatch, caplog):
    """django-celery-beat's tick, its connection lost mid-sync and then found closed, stopped Beat with a traceback."""
    from django_celery_beat.schedulers import DatabaseScheduler

    from resonate_site.beat import RETRY_S, Scheduler
    from resonate_site.celery import app

    def lost(self, *args, **kwargs):
        raise OperationalError("the connection is closed")

    monkeypatch.setattr(DatabaseScheduler, "tick", lost)
    scheduler = Scheduler(app=app, lazy=True)

    with caplog.at_level(logging.WARNING):
        assert scheduler.tick() == RETRY_S

    assert [record.exc_info for record in caplog.records] == [None]
    assert "out of reach: OperationalError: the connection is closed" in caplog.records[0].getMessage()


def test_beat_s_tick_that_meets_a_bug_raises_it():
    from django_celery_beat.schedulers import DatabaseScheduler

    from resonate_site.beat import Scheduler
    from resonate_site.celery import app

    scheduler = Scheduler(app=app, lazy=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseScheduler, "tick", lambda self, *a, **k: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            scheduler.tick()
