"""The background sweep: fire due timeouts as they come due, from a Celery task or the embedded server."""

import time

from floor import telemetry
from floor.clock import now_ms
from floor.conf import resonate_settings
from floor.loops import keep_running
from outbox.models import Pause
from timeouts.due import next_due
from timeouts.sweep import sweep


def keep_sweeping(seconds, stopping=lambda: False):
    """Sweep for `seconds` (or until `stopping()`), firing each timeout within about SWEEP_IDLE_MS of its deadline.

    After a sweep the loop sleeps until the next deadline, but never longer than SWEEP_IDLE_MS, so a
    timeout armed meanwhile is noticed. While debug.start has paused background work, nothing fires.
    Returns how many transitions ran.
    """
    idle = resonate_settings.SWEEP_IDLE_MS / 1000
    until = time.monotonic() + seconds

    def sweeping():
        return sweep_once(idle, until)

    return keep_running(sweeping, seconds, stopping, retry_after=idle)


SLICE_S = 1.0  # under a steady stream of due timeouts a sweep returns this often: pause, stop, connections


def sweep_once(idle, until=float("inf")):
    """One sweep from the current time on, for at most SLICE_S (or until `until`, a time.monotonic() deadline);
    (transitions run, seconds until the next look)."""
    if Pause.is_paused():
        return 0, idle
    upcoming = next_due()
    if upcoming is not None and upcoming <= now_ms():
        until, started = min(until, time.monotonic() + SLICE_S), time.time_ns()
        fired = sweep(now_ms(), batch=resonate_settings.SWEEP_BATCH, clock=now_ms, until=until)
        if fired and telemetry.tracer is not None:
            telemetry.finished("resonate.sweep", started, **{"resonate.fired": fired})
        upcoming = next_due()
    else:
        # Nothing due: no sweep, whose transactions (one per category) each take the database's writer on SQLite,
        # twenty times a second. Requests waited for them 13% of the embedded mode's time (bench/HISTORY.md,
        # 2026-12-05). A deadline that comes meanwhile is seen at the next look, within SWEEP_IDLE_MS.
        fired = 0
    wait = idle if upcoming is None else min(idle, (upcoming - now_ms()) / 1000)
    if fired == 0:
        wait = max(wait, 0.005)  # due entries held by another sweeper: let it finish
    return fired, wait
