"""The one background loop: the sweeper, the delivery pass and the commands' --loop all run in it."""

import logging
import time

from django.db import close_old_connections

from floor.outages import log_failure

log = logging.getLogger(__name__)


def keep_running(step, seconds, stopping=lambda: False, retry_after=1.0):
    """Call step() for `seconds` (or until `stopping()`); the sum of what it returned.

    step() returns (how much it did, seconds to wait before the next call). Each call starts with Django's
    per-request connection hygiene (a connection past its age or broken is dropped). An exception is logged
    and the loop goes on after `retry_after` seconds: the database away for a moment must not end it.
    """
    until = time.monotonic() + seconds
    done = 0
    while time.monotonic() < until and not stopping():
        try:
            close_old_connections()
            did, wait = step()
        except Exception:
            log_failure(log, "%s failed; trying again", getattr(step, "__name__", "background step"))
            did, wait = 0, retry_after
        done += did
        time.sleep(max(0.0, min(wait, until - time.monotonic())))
    return done
