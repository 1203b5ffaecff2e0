"""Celery tasks of message delivery (production mode)."""

from celery import shared_task

from outbox.delivery import deliver as deliver_messages
from outbox.delivery import deliver_due as deliver_all_due
from outbox.models import Pause


@shared_task(ignore_result=True)
def deliver(keys):
    """Deliver the messages a transaction just committed."""
    if not Pause.is_paused():
        deliver_messages(keys, limit=len(keys))


@shared_task(ignore_result=True)
def deliver_due():
    """Started by Beat every DELIVERY_PASS_MS: anything undelivered, and HTTP pushes due for a retry."""
    if not Pause.is_paused():
        deliver_all_due()
