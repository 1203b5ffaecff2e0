"""Celery tasks of the timeout machinery (production mode)."""

from celery import shared_task

from resonate_site.conf import resonate_settings
from schedules.sweeper import keep_sweeping


@shared_task(ignore_result=True)
def sweep():
    """Started by Beat every SWEEP_PERIOD_MS; sweeps until the next one starts, so timers fire on time."""
    return keep_sweeping(resonate_settings.SWEEP_PERIOD_MS / 1000)
