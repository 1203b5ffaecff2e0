"""Liveness and readiness checks (PROTOCOL.md §8.2)."""

from django.db import DatabaseError, connection
from django.http import HttpResponse


def health(request):
    return HttpResponse(status=200)


def ready(request):
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return HttpResponse("database unavailable", status=503, content_type="text/plain")
    return HttpResponse(status=200)
