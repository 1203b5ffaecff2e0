"""Running one protocol operation in one transaction, retried when it loses a race."""

import logging
import random
import time

from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction

from resonate_site.conf import resonate_settings

log = logging.getLogger(__name__)

# PostgreSQL: serialization_failure, deadlock_detected, lock_not_available.
RETRYABLE_SQLSTATES = {"40001", "40P01", "55P03"}
# PostgreSQL: admin_shutdown, crash_shutdown, cannot_connect_now (class 08 is connection_exception).
SHUTDOWN_SQLSTATES = {"57P01", "57P02", "57P03"}


class Busy(Exception):
    """The operation kept losing races; the caller may retry it."""


def lost_connection(error):
    """Whether the database dropped the connection (a restart, a proxy's idle timeout…)."""
    state = getattr(error.__cause__, "sqlstate", None) or ""
    return state.startswith("08") or state in SHUTDOWN_SQLSTATES or "connection is closed" in str(error)


def lost_race(error):
    """Whether a database error means "another transaction got there first" rather than a bug."""
    if isinstance(error, IntegrityError):
        return True  # two creates of one id: the loser retries and finds the winner's row
    cause = error.__cause__
    if getattr(cause, "sqlstate", None) in RETRYABLE_SQLSTATES:
        return True
    return "database is locked" in str(error) or "database table is locked" in str(error)


def run_atomically(operation, *args):
    """operation(*args) inside transaction.atomic(), re-run from scratch on a lost race (bounded).

    A kept-alive connection that the database has closed meanwhile is dropped and the operation runs
    again on a new one.
    """
    attempts = resonate_settings.DB_RETRIES
    for attempt in range(1, attempts + 1):
        try:
            with transaction.atomic():
                return operation(*args)
        except (IntegrityError, OperationalError, InterfaceError) as error:
            if lost_connection(error):
                log.info("reconnecting after %s", error)
                connection.close()
                continue
            if not lost_race(error):
                raise
            log.info("retrying %s after a lost race (attempt %d): %s", operation.__name__, attempt, error)
            time.sleep(random.uniform(0, 0.002 * attempt))
    raise Busy(f"{operation.__name__} lost {attempts} races in a row")
