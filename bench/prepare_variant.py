"""Settings for a process that runs one of issue 26's designs of statements sent together (bench only).

    DJANGO_SETTINGS_MODULE=prepare_variant PYTHONPATH=bench RESONATE_PREPARE_DESIGN=b|c

b: as the code stands: statements a process has sent together before go as one PL/pgSQL function made of their
   text (floor.functions), called as one statement.
c: they never do: statements sent together go as one client-bound string, planned at each call.
In both, a statement sent alone is prepared by psycopg (DATABASE_PREPARE_THRESHOLD).

a, statements sent together prepared by name (PREPARE in front of the string, then EXECUTEs), is the code as it
stood at 644d4a8: bench/prepare_designs.py runs it from a checkout of that commit (--a-tree), with that checkout's
own bench/prepare_variant.py.

The patch is applied once Django's apps are loaded (Design.ready), in every process that reads these settings:
`manage.py serve`'s server processes import them anew.
"""

import os

from django.apps import AppConfig

from resonate_site.settings import *  # noqa: F403
from resonate_site.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "prepare_variant.Design"]

DESIGN = os.environ.get("RESONATE_PREPARE_DESIGN", "b")


class Design(AppConfig):
    name = "prepare_variant"
    label = "prepare_variant"

    def ready(self):
        if DESIGN == "c":
            from floor import functions

            functions.SENT_BEFORE = 2**62  # never sent often enough to become a function
