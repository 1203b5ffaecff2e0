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
    and the loop goes on after `retry_after` seconds: the database away for a moment must not end it. While
    the step keeps failing it is logged once every TELL_EVERY_S (a sweeper retries every 50 ms), and once when
    it works again.
    """
    name = getattr(step, "__name__", "background step")
    until = time.monotonic() + seconds
    done = failures = 0
    told = failing_since = 0.0
    while time.monotonic() < until and not stopping():
        try:
            close_old_connections()
            did, wait = step()
        except Exception:
            failures += 1
            if failures == 1:
                failing_since = time.monotonic()
            if failures == 1 or time.monotonic() - told >= TELL_EVERY_S:
                log_failure(
                    log, "%s failed; trying again every %.2f s (%d failures so far)", name, retry_after, failures
                )
                told = time.monotonic()
            did, wait = 0, retry_after
        else:
            if failures:
                elapsed = time.monotonic() - failing_since
                log.warning("%s works again, after %d failures in %.1f s", name, failures, elapsed)
                failures = 0
        done += did
        time.sleep(max(0.0, min(wait, until - time.monotonic())))
    return done


TELL_EVERY_S = 10.0  # how often a background step that keeps failing is logged
