"""Failures that are the world's, not the code's: the database or Redis out of reach for a while.

Background work (the sweeper, the deliverer, Celery's wake-ups) meets them whenever PostgreSQL restarts, a proxy cuts
its connections or Redis goes away, and it goes on once they are back: such a failure is logged as one WARNING line
naming what was out of reach. Anything else is a bug, logged with its traceback, so that a traceback in a log always
means something to fix (the fault suite, the live tests and the SDK tests fail on one).
"""

import logging
import sys
from functools import cache


class Outage(Exception):
    """The server's own exceptions that say something is out of reach (floor.transactions.Busy: a request's retries
    ran out on lost races or on a database it cannot reach)."""


def is_outage(error):
    """Whether `error` says that something the server depends on is out of reach, rather than that the code is wrong."""
    return isinstance(error, _outage_classes())


@cache
def _outage_classes():
    from django.db import InterfaceError, OperationalError

    classes = [Outage, OperationalError, InterfaceError, ConnectionError, TimeoutError]
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        classes += [RedisConnectionError, RedisTimeoutError]
    except ImportError:  # the embedded server needs no Redis client
        pass
    try:
        from billiard.exceptions import WorkerLostError  # a Celery pool process killed (OOM, an operator)
        from kombu.exceptions import OperationalError as BrokerUnreachable

        classes += [BrokerUnreachable, WorkerLostError]
    except ImportError:
        pass
    return tuple(classes)


# PostgreSQL: admin_shutdown, crash_shutdown, cannot_connect_now (class 08 is connection_exception).
SHUTDOWN_SQLSTATES = {"57P01", "57P02", "57P03"}


def lost_connection(error):
    """Whether the database connection is gone (a restart, a cut network, a proxy's idle timeout, a refused connect).

    Errors the server sends carry a SQLSTATE; psycopg reports a dead or unreachable server ("server
    closed the connection unexpectedly", "connection refused") as an OperationalError without one.
    """
    from django.db import InterfaceError, OperationalError, connection

    if connection.vendor != "postgresql":
        return False
    state = getattr(error.__cause__, "sqlstate", None) or ""
    if state.startswith("08") or state in SHUTDOWN_SQLSTATES:
        return True
    return isinstance(error, (OperationalError, InterfaceError)) and not state


def log_failure(log, message, *args, level=logging.WARNING):
    """Log the exception being handled: one line at `level` if it is an outage, else with its traceback (ERROR)."""
    error = sys.exc_info()[1]
    if is_outage(error):
        log.log(level, f"{message} (out of reach: %s: %s)", *args, type(error).__name__, one_line(error))
    else:
        log.exception(message, *args)


def outage_within(error, depth=4):
    """The outage that `error` is, or that it was raised from or while handling, within `depth` links of its chain;
    None if there is none. A library may wrap an outage in its own error: Celery Beat's SchedulingError, raised
    while handling kombu's OperationalError; billiard's ExceptionWithTraceback, which carries a pool process's
    WorkerLostError (`exc`) to the Celery worker that logs it."""
    for _ in range(depth):
        error = getattr(error, "exc", error) if type(error).__name__ == "ExceptionWithTraceback" else error
        if error is None or is_outage(error):
            return error
        error = error.__cause__ or error.__context__
    return None


def one_line(error):
    return " ".join(str(error).split())[:500]


class OutagesInOneLine(logging.Filter):
    """For the log handlers (settings.LOGGING): a record that carries an outage as its exception becomes one WARNING
    line naming it, without the traceback (and without anything after its message's first line: Celery Beat adds a
    formatted stack). The server's own code says so itself (log_failure); this is for the libraries it runs on,
    Celery, kombu and django-celery-beat, which log a broker or database out of reach with its traceback."""

    def filter(self, record):
        error = outage_within(record.exc_info[1]) if record.exc_info else None
        if error is not None:
            first = record.getMessage().split("\n", 1)[0]
            record.msg, record.args = f"{first} (out of reach: {type(error).__name__}: {one_line(error)})", None
            record.exc_info = record.exc_text = record.stack_info = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
