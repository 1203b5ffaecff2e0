"""Celery Beat's scheduler (resonate_site.beat): when the sweep first runs."""

import pytest
from django.utils import timezone

from resonate_site.beat import Scheduler
from resonate_site.celery import app


@pytest.mark.django_db
def test_a_new_installation_s_first_sweep_is_due_as_beat_starts_and_a_restarted_beat_keeps_the_last_run(monkeypatch):
    """django-celery-beat took a new entry's last run for its start, so timeouts waited one SWEEP_PERIOD for the
    first sweep of a new installation."""
    from django_celery_beat import schedulers
    from django_celery_beat.models import PeriodicTask

    monkeypatch.setattr(schedulers, "close_old_connections", lambda: None)  # it would close the test's database

    due, _ = Scheduler(app=app).schedule["sweep"].is_due()
    assert due, "a new installation's first sweep waits an interval"

    PeriodicTask.objects.filter(name="sweep").update(last_run_at=timezone.now())  # as a run records it
    due, next_in = Scheduler(app=app).schedule["sweep"].is_due()
    assert not due and 0 < next_in <= 2
