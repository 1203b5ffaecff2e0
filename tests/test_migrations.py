"""Migrations that the previous release can run beside (expand, then contract), checked by django-migration-linter.

A rolling upgrade migrates while the previous release's servers still serve (README: Production mode, Rolling
restart and upgrade), so a migration may not drop or rename what they read and write, nor add a column they do not
fill without a default. Migrations released before this rule are listed below and not linted; every later one is.
"""

import importlib
import shutil
import sys
import warnings
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django_migration_linter import MigrationLinter

APPS = ["promises", "tasks", "schedules", "outbox"]
RELEASED_BEFORE_THE_RULE = [  # 2026-12-04: expand/contract from here on
    "0001_initial",
    "0002_promise_created",
    "0003_fewer_indexes",
    "0004_without_pattern_twins",
    "0002_message_unreached_since",
    "0003_key_without_like",
    "0002_without_pattern_twins",
]


def lint():
    linter = MigrationLinter(
        include_apps=APPS, ignore_name=RELEASED_BEFORE_THE_RULE, no_cache=True, all_warnings_as_errors=True
    )
    linter.lint_all_migrations()
    return linter


@pytest.mark.django_db(transaction=True)
def test_every_migration_since_the_rule_can_run_beside_the_previous_release():
    linter = lint()
    assert not linter.has_errors, "a migration the previous release cannot run beside (see the linter's output)"
    assert linter.nb_warnings == 0


@pytest.mark.postgres
@pytest.mark.django_db
def test_postgresql_migrations_wait_briefly_for_locks_and_build_indexes_concurrently(tmp_path, settings, monkeypatch):
    """The previous release keeps serving while a migration runs: a migration never queues requests for long behind
    a lock it waits for, and an index is built without locking writes out (floor/postgresql/base.py)."""
    altering = StringIO()
    call_command("sqlmigrate", "promises", "0003_fewer_indexes", stdout=altering)
    assert "SET lock_timeout TO '2s';" in altering.getvalue()

    package = inject("outbox", ADDS_AN_INDEX, tmp_path, settings, monkeypatch)
    indexing = StringIO()
    try:
        call_command("sqlmigrate", "outbox", "9001_an_index", stdout=indexing)
    finally:
        sys.modules.pop(package, None)
    assert "CREATE INDEX CONCURRENTLY" in indexing.getvalue()


ADDS_AN_INDEX = """
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("outbox", "{last}")]
    operations = [migrations.AddIndex("message", models.Index(fields=["attempts"], name="outbox_msg_attempts_x"))]
"""


def inject(app, migration, tmp_path, settings, monkeypatch):
    """The app's migrations and `migration` after them (as 9001_…), as the app's migration module: its name."""
    package = f"injected_{app}_migrations"
    shutil.copytree(
        importlib.import_module(f"{app}.migrations").__path__[0],
        tmp_path / package,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    name = "9001_an_index" if "AddIndex" in migration else "9001_drop_a_column_still_read"
    (tmp_path / package / f"{name}.py").write_text(migration.format(last=sorted(migration_names(app))[-1]))
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.MIGRATION_MODULES = {app: package}
    return package


INCOMPATIBLE = """
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("outbox", "{last}")]
    operations = [migrations.RemoveField("message", "unreached_since")]
"""


@pytest.mark.django_db(transaction=True)
def test_the_check_fails_on_a_migration_the_previous_release_cannot_run_beside(tmp_path, settings, monkeypatch):
    """A column dropped while the previous release's servers still read it: the linter must say no."""
    package = inject("outbox", INCOMPATIBLE, tmp_path, settings, monkeypatch)
    try:
        linter = lint()
    finally:
        sys.modules.pop(package, None)
    assert linter.has_errors
    assert linter.nb_erroneous == 1


def migration_names(app):
    module = importlib.import_module(f"{app}.migrations")
    return [path.stem for path in Path(module.__path__[0]).glob("[0-9]*.py")]


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_not_null_column_without_a_database_default_is_warned_of_only_on_a_table_holding_rows():
    """A first migrate (every table empty) prints no warning for django-celery-beat's NOT NULL columns; the same
    column added to a table that holds rows is still warned of (floor/postgresql/base.py)."""
    from django.db import connection, models
    from django_celery_beat.models import ClockedSchedule, IntervalSchedule
    from django_zero_downtime_migrations.backends.postgres.schema import UnsafeOperationWarning

    IntervalSchedule.objects.create(every=1, period=IntervalSchedule.SECONDS)

    def warnings_adding_a_column_to(model):
        column = models.IntegerField(default=0)
        column.set_attributes_from_name("added_here")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with connection.schema_editor() as editor:  # rolled back with the test's transaction
                editor.add_field(model, column)
        return [warning for warning in seen if issubclass(warning.category, UnsafeOperationWarning)]

    assert warnings_adding_a_column_to(ClockedSchedule) == []
    assert len(warnings_adding_a_column_to(IntervalSchedule)) == 1
