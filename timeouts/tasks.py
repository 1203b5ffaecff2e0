"""Celery tasks of the timeout machinery (production mode)."""

from celery import shared_task

from floor.conf import beat_seconds, resonate_settings
from timeouts.sweeper import keep_sweeping


@shared_task(ignore_result=True)
def sweep():
    """Started by Beat every SWEEP_PERIOD_MS (whole seconds); sweeps until the next one starts."""
    return keep_sweeping(beat_seconds(resonate_settings.SWEEP_PERIOD_MS))
