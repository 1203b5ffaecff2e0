"""Celery tasks of message delivery (production mode)."""

import logging
from contextlib import contextmanager

from celery import shared_task

from floor.outages import is_outage
from outbox.delivery import deliver as deliver_messages
from outbox.delivery import deliver_due as deliver_all_due
from outbox.models import Pause

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def deliver(keys):
    """Deliver the messages a transaction just committed."""
    with outages_told(f"delivering {len(keys)} messages"):
        if not Pause.is_paused():
            deliver_messages(keys, limit=len(keys))


@shared_task(ignore_result=True)
def deliver_due():
    """Started by Beat every DELIVERY_PASS_MS: anything undelivered, and HTTP pushes due for a retry."""
    with outages_told("the delivery pass"):
        if not Pause.is_paused():
            deliver_all_due()


@contextmanager
def outages_told(what):
    """A wake-up that meets the database or Redis out of reach logs one line and ends: Beat sends the next one, and
    what it would have delivered waits in the outbox. Anything else goes to Celery, which logs its traceback."""
    try:
        yield
    except Exception as error:
        if not is_outage(error):
            raise
        log.warning("%s failed; the next pass tries again (out of reach: %s: %s)", what, type(error).__name__, error)
