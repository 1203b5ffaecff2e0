"""The operations console: its site in site.py (ConsoleSite), its pages in promises.py, tasks.py, schedules.py and
outbox.py, the workflow page in workflow.py."""

from django.contrib import admin

from console import outbox, promises, schedules, tasks  # noqa: F401 (their pages register with the site)
from floor.conf import resonate_settings


def hide_beat_schedules():
    """django-celery-beat's pages (periodic tasks, intervals, crontabs…) matter only where Beat runs: in embedded
    mode nothing reads them, so the console does not show them."""
    from django_celery_beat import models as beat

    for model in (
        beat.PeriodicTask,
        beat.IntervalSchedule,
        beat.CrontabSchedule,
        beat.SolarSchedule,
        beat.ClockedSchedule,
    ):
        if admin.site.is_registered(model):
            admin.site.unregister(model)


if resonate_settings.BACKGROUND != "celery":
    hide_beat_schedules()
