"""Migrations that the previous release can run beside (expand, then contract), checked by django-migration-linter.

A rolling upgrade migrates while the previous release's servers still serve (README: Production mode, Rolling
restart and upgrade), so a migration may not drop or rename what they read and write, nor add a column they do not
fill without a default. Migrations released before this rule are listed below and not linted; every later one is.
"""

import importlib
import shutil
import sys
from pathlib import Path

import pytest
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


INCOMPATIBLE = """
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("outbox", "{last}")]
    operations = [migrations.RemoveField("message", "unreached_since")]
"""


@pytest.mark.django_db(transaction=True)
def test_the_check_fails_on_a_migration_the_previous_release_cannot_run_beside(tmp_path, settings, monkeypatch):
    """A column dropped while the previous release's servers still read it: the linter must say no."""
    import outbox.migrations

    package = tmp_path / "injected_outbox_migrations"
    shutil.copytree(outbox.migrations.__path__[0], package, ignore=shutil.ignore_patterns("__pycache__"))
    last = sorted(migration_names("outbox"))[-1]
    (package / "9001_drop_a_column_still_read.py").write_text(INCOMPATIBLE.format(last=last))
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.MIGRATION_MODULES = {"outbox": "injected_outbox_migrations"}
    try:
        linter = lint()
    finally:
        sys.modules.pop("injected_outbox_migrations", None)
    assert linter.has_errors
    assert linter.nb_erroneous == 1


def migration_names(app):
    module = importlib.import_module(f"{app}.migrations")
    return [path.stem for path in Path(module.__path__[0]).glob("[0-9]*.py")]
