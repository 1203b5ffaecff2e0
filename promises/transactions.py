"""Running one protocol operation in one transaction, retried when it loses a race."""

import logging
import random
import time

from django.db import IntegrityError, OperationalError, transaction

from resonate_site.conf import resonate_settings

log = logging.getLogger(__name__)

# PostgreSQL: serialization_failure, deadlock_detected, lock_not_available.
RETRYABLE_SQLSTATES = {"40001", "40P01", "55P03"}


class Busy(Exception):
    """The operation kept losing races; the caller may retry it."""


def lost_race(error):
    """Whether a database error means "another transaction got there first" rather than a bug."""
    if isinstance(error, IntegrityError):
        return True  # two creates of one id: the loser retries and finds the winner's row
    cause = error.__cause__
    if getattr(cause, "sqlstate", None) in RETRYABLE_SQLSTATES:
        return True
    return "database is locked" in str(error) or "database table is locked" in str(error)


def run_atomically(operation, *args):
    """operation(*args) inside transaction.atomic(), re-run from scratch on a lost race (bounded)."""
    attempts = resonate_settings.DB_RETRIES
    for attempt in range(1, attempts + 1):
        try:
            with transaction.atomic():
                return operation(*args)
        except (IntegrityError, OperationalError) as error:
            if not lost_race(error):
                raise
            log.info("retrying %s after a lost race (attempt %d): %s", operation.__name__, attempt, error)
            time.sleep(random.uniform(0, 0.002 * attempt))
    raise Busy(f"{operation.__name__} lost {attempts} races in a row")
