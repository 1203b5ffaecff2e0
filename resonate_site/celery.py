"""The Celery application: in production mode, workers run the timeout sweep and message delivery."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

app = Celery("resonate_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
