"""A server process with a defect put in on purpose, so that a test can watch the linearizability checker catch it.

    python -m tests.linearizability.injected BUG manage.py serve --port …

patches the server's own modules in this process only, then runs manage.py as its __main__ (`serve` with one
server process runs uvicorn in this same process). Production code stays as it is. Runs on the runtime
interpreter: nothing here may import a test dependency.
"""

import os
import runpy
import sys


def without_row_locks():
    """The handlers read, decide and write without the promise row lock that serializes them (floor.rows' lock
    helpers leave out FOR UPDATE): two requests on one task can both see it acquired, or pending, and both act."""
    from floor import rows

    rows._locks = lambda connection, lock: False


def without_version_check():
    """task.fulfill, release, suspend and fence accept any version: a worker whose lease was taken over still
    writes (the fencing token is ignored)."""
    from tasks import handlers

    checked = handlers.held

    def held(task, req, now):
        return checked(task, {**req, "version": task.version}, now)

    handlers.held = held


BUGS = {"no-row-locks": without_row_locks, "no-version-check": without_version_check}


def main():
    bug, *argv = sys.argv[1:]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_site.settings")
    import django

    django.setup()
    BUGS[bug]()
    print(f"linearizability: serving with the defect {bug!r} put in", file=sys.stderr, flush=True)
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
