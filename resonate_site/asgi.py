"""ASGI entry point: resonate_site.asgi:application.

Long-lived streams (GET /poll/…) run on Django's async handler; every other request, the protocol's
short database-bound ones above all, runs on the WSGI handler in a bounded thread pool, which is
several times faster than Django's sync-view-under-ASGI path (bench/README.md).
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

from a2wsgi import WSGIMiddleware  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402

from resonate_site.auth import refuse_unprotected  # noqa: E402

STREAM_PREFIXES = ("/poll/",)
THREADS = int(os.environ.get("RESONATE_WSGI_THREADS", "2"))

django_asgi = get_asgi_application()
refuse_unprotected()  # production mode does not start without auth (resonate_site/auth.py)
django_wsgi = WSGIMiddleware(get_wsgi_application(), workers=THREADS)


async def application(scope, receive, send):
    if scope["type"] == "http" and not scope["path"].startswith(STREAM_PREFIXES):
        await django_wsgi(scope, receive, send)
    else:
        await django_asgi(scope, receive, send)
