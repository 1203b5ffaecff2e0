"""WSGI entry point: resonate_site.wsgi:application."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

application = get_wsgi_application()

from resonate_site.auth import refuse_unprotected  # noqa: E402 (needs the settings loaded above)

refuse_unprotected()  # production mode does not start without auth
