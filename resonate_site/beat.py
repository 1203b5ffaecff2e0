"""Celery Beat's scheduler: django-celery-beat's, riding out a database that goes away."""

import contextlib
import logging

from django.db import connections
from django_celery_beat.schedulers import DatabaseScheduler

from floor.outages import is_outage, log_failure

log = logging.getLogger(__name__)

RETRY_S = 1.0  # after an outage, the next tick


class Scheduler(DatabaseScheduler):
    """A tick that meets the database out of reach (its connection lost while Beat saved its entries, then found
    closed by the next read) stopped Beat with a traceback, and supervisord started it again. Here the outage is one
    line, the connections are dropped, and the next tick, RETRY_S later, connects anew (found by the linearizability
    sweep's dropped connections)."""

    def tick(self, *args, **kwargs):
        try:
            return super().tick(*args, **kwargs)
        except Exception as error:
            if not is_outage(error):
                raise
            log_failure(log, "Beat could not reach the database; its next tick tries again")
            for connection in connections.all(initialized_only=True):
                with contextlib.suppress(Exception):  # a connection already broken may fail to close
                    connection.close()
            return RETRY_S
