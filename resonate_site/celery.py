"""The Celery application: in production mode, workers run the timeout sweep and message delivery."""

import functools
import logging
import os

from celery import Celery, signals
from celery.worker.consumer import Consumer as CeleryConsumer

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

log = logging.getLogger(__name__)

app = Celery("resonate_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_process_init.connect
def trace_worker(**kwargs):
    """Each worker process sends its own traces when OTEL_* asks for them (floor/telemetry.py)."""
    from floor import telemetry

    telemetry.start("resonate-worker")


@signals.worker_process_shutdown.connect
def flush_counts(**kwargs):
    """A pool process ends with os._exit, without atexit: its last counts are folded in first (floor.counters)."""
    from floor.counters import flush

    flush()


@signals.beat_init.connect
def start_beat(sender, **kwargs):
    """Beat sends traces when OTEL_* asks for them, and a SIGTERM lets the tick under way finish."""
    from floor import telemetry
    from resonate_site.beat import exit_between_ticks

    telemetry.start("resonate-beat")
    exit_between_ticks(sender)


class Consumer(CeleryConsumer):
    """Celery's task consumer, trying a lost broker again every 0.5 to 2 s, and never exiting over what it had
    reserved when the broker went.

    Celery's own pause between attempts grows by 2 s up to 30 s, so a worker came back up to 12 s after
    the end of a 30 s broker outage; the pauses are not a setting, only arguments of kombu's call.
    """

    def on_connection_error_after_connected(self, exc):
        """Celery closes the lost connection here, and kombu's Redis transport then puts back the messages the
        worker had reserved but not started. When the transport has already dropped its settings, that raises
        AttributeError ('NoneType' object has no attribute 'hostname'), which Celery treats as unrecoverable:
        the worker exited (tests/chaos/test_celery_worker.py caught it). Those messages are wake-ups Beat sends
        again (the work is in the database), so the worker lets them go and reconnects."""
        try:
            super().on_connection_error_after_connected(exc)
        except AttributeError as error:
            log.warning("the lost broker connection could not take back reserved wake-ups (%r); reconnecting", error)

    def ensure_connected(self, conn):
        conn.ensure_connection = functools.partial(
            conn.ensure_connection, interval_start=0.5, interval_step=0.5, interval_max=2
        )
        return super().ensure_connected(conn)
