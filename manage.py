#!/usr/bin/env python
"""Django's command-line utility for administrative tasks.

`./manage.py …` and `python manage.py …` work from any Python: without Django importable, it runs itself
again with the project's .venv (made by bin/setup) when there is one.
"""

import os
import sys
from pathlib import Path


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")
    try:
        from django.core.management import execute_from_command_line
    except ImportError:
        venv_python = Path(__file__).resolve().parent / ".venv" / "bin" / "python"
        if venv_python.exists() and not os.environ.get("RESONATE_MANAGE_VENV"):
            os.environ["RESONATE_MANAGE_VENV"] = str(venv_python)  # once: a broken .venv is not retried forever
            os.execv(venv_python, [str(venv_python), __file__, *sys.argv[1:]])
        raise SystemExit("manage.py: Django is not installed for this Python; run bin/setup first") from None
    from django.core.exceptions import ImproperlyConfigured

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:  # a setting that cannot be read (DATABASE_URL, …): its message, no traceback
        raise SystemExit(f"manage.py: {error}") from None


if __name__ == "__main__":
    main()
