"""ASGI entry point: resonate_site.asgi:application."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")

application = get_asgi_application()
