"""WSGI entry point: resonate_site.wsgi:application."""

import os

import django
from django.core.wsgi import get_wsgi_application

from floor import telemetry

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

django.setup(set_prefix=False)
telemetry.start("resonate-server")  # when OTEL_* asks for it, before the handler is built (floor/telemetry.py)
application = get_wsgi_application()

from resonate_site.auth import refuse_unprotected  # noqa: E402 (needs the settings loaded above)

refuse_unprotected()  # production mode does not start without auth
