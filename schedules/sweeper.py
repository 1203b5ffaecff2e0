"""The background sweep: fire due timeouts as they come due, from a Celery task or the embedded server."""

import logging
import time

from django.db import close_old_connections

from floor import rows
from floor.clock import now_ms
from floor.conf import resonate_settings
from outbox.models import Pause
from promises.models import Promise
from schedules.models import Schedule
from schedules.timeouts import sweep
from tasks.models import Task

log = logging.getLogger(__name__)

NEXT_DUE = (
    f"SELECT MIN(t) FROM ("
    f" SELECT MIN(timeout_at) AS t FROM {rows.quote(Promise._meta.db_table)} WHERE timeout_armed"
    f" UNION ALL SELECT MIN(timeout_at) FROM {rows.quote(Task._meta.db_table)} WHERE timeout_kind IS NOT NULL"
    f" UNION ALL SELECT MIN(next_run_at) FROM {rows.quote(Schedule._meta.db_table)}) AS due"
)


def next_due():
    """The earliest deadline of any armed timeout (ms), or None."""
    return rows.query(NEXT_DUE)[0][0]


def keep_sweeping(seconds, stopping=lambda: False):
    """Sweep for `seconds` (or until `stopping()`), firing each timeout within about SWEEP_IDLE_MS of its deadline.

    After a sweep the loop sleeps until the next deadline, but never longer than SWEEP_IDLE_MS, so a
    timeout armed meanwhile is noticed. While debug.start has paused background work, nothing fires.
    Returns how many transitions ran.
    """
    idle = resonate_settings.SWEEP_IDLE_MS / 1000
    until = time.monotonic() + seconds
    fired = 0
    while time.monotonic() < until and not stopping():
        try:
            fired_now, wait = sweep_once(idle, until)
        except Exception:  # the database away for a moment must not end the loop
            log.exception("sweep failed; trying again")
            fired_now, wait = 0, idle
        fired += fired_now
        time.sleep(max(0.0, min(wait, until - time.monotonic())))
    return fired


SLICE_S = 1.0  # under a steady stream of due timeouts a sweep returns this often: pause, stop, connections


def sweep_once(idle, until=float("inf")):
    """One sweep from the current time on, for at most SLICE_S (or until `until`, a time.monotonic() deadline);
    (transitions run, seconds until the next look)."""
    close_old_connections()
    if Pause.is_paused():
        return 0, idle
    until = min(until, time.monotonic() + SLICE_S)
    fired = sweep(now_ms(), batch=resonate_settings.SWEEP_BATCH, clock=now_ms, until=until)
    upcoming = next_due()
    wait = idle if upcoming is None else min(idle, (upcoming - now_ms()) / 1000)
    if fired == 0:
        wait = max(wait, 0.005)  # due entries held by another sweeper: let it finish
    return fired, wait
