"""The Celery application: in production mode, workers run the timeout sweep and message delivery."""

import functools
import os

from celery import Celery
from celery.worker.consumer import Consumer as CeleryConsumer

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

app = Celery("resonate_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class Consumer(CeleryConsumer):
    """Celery's task consumer, trying a lost broker again every 0.5 to 2 s.

    Celery's own pause between attempts grows by 2 s up to 30 s, so a worker came back up to 12 s after
    the end of a 30 s broker outage; the pauses are not a setting, only arguments of kombu's call.
    """

    def ensure_connected(self, conn):
        conn.ensure_connection = functools.partial(
            conn.ensure_connection, interval_start=0.5, interval_step=0.5, interval_max=2
        )
        return super().ensure_connected(conn)
