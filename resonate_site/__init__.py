"""The Resonate server's Django project."""

from resonate_site.celery import app as celery_app

__all__ = ["celery_app"]
