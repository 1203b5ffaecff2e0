"""Celery Beat's scheduler: django-celery-beat's, riding out a database that goes away."""

import contextlib
import datetime
import logging

from celery import platforms
from django.db import connections
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry

from floor.outages import is_outage, log_failure

log = logging.getLogger(__name__)

RETRY_S = 1.0  # after an outage, the next tick


LONG_AGO = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)


class Entry(ModelEntry):
    """An interval entry Beat has never run is due at once. django-celery-beat takes a new entry's last run for
    now, so the first sweep of a new installation came one SWEEP_PERIOD after Beat's start, and a timeout due
    meanwhile waited for it (2.2 s after the servers were ready, on a quiet VM). Once an entry has run, its last run
    is stored, and a Beat started again runs it when that says."""

    def __init__(self, model, app=None):
        if model.last_run_at is None and model.interval_id is not None and model.start_time is None:
            model.last_run_at = LONG_AGO
        super().__init__(model, app=app)


class Scheduler(DatabaseScheduler):
    """A tick that meets the database out of reach (its connection lost while Beat saved its entries, then found
    closed by the next read) stopped Beat with a traceback, and supervisord started it again. Here the outage is one
    line, the connections are dropped, and the next tick, RETRY_S later, connects anew (found by the linearizability
    sweep's dropped connections)."""

    Entry = Entry
    ticking = False  # inside tick(): a stop request waits for its end (exit_between_ticks)
    stopping = False

    def tick(self, *args, **kwargs):
        self.ticking = True
        try:
            interval = super().tick(*args, **kwargs)
        except Exception as error:
            if not is_outage(error):
                raise
            log_failure(log, "Beat could not reach the database; its next tick tries again")
            for connection in connections.all(initialized_only=True):
                with contextlib.suppress(Exception):  # a connection already broken may fail to close
                    connection.close()
            interval = RETRY_S
        finally:
            self.ticking = False
        return 0 if self.stopping else interval  # a stop asked for during the tick: Beat exits now, not after a sleep


def exit_between_ticks(service):
    """Celery's own SIGTERM/SIGINT handler closes the scheduler and raises SystemExit wherever Beat is. Met in the
    middle of a publish, that closed the broker socket under kombu's feet and Beat logged "Couldn't apply scheduled
    task sweep: I/O operation on closed file" with a traceback (a CI teardown caught it). This handler, installed at
    beat_init over Celery's, lets a tick under way finish and stops Beat right after it; between ticks, Beat exits
    at once as before. Either way Beat's own exit path saves the schedule and closes the scheduler."""

    def stop(signum, frame):
        service._is_shutdown.set()  # what Service.stop() sets, without its log line inside a signal handler
        scheduler = service.__dict__.get("scheduler")  # a cached_property: None until the first tick built it
        if scheduler is not None and getattr(scheduler, "ticking", False):
            scheduler.stopping = True
            return
        raise SystemExit()

    platforms.signals.update(SIGTERM=stop, SIGINT=stop)
