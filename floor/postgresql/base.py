"""Django's PostgreSQL backend, migrating without long locks.

Migrations run while the previous release serves (README: Rolling restart and upgrade): the schema editor is
django-pg-zero-downtime-migrations', which waits at most ZERO_DOWNTIME_MIGRATIONS_LOCK_TIMEOUT for a lock (a
migration that cannot get one fails, and is run again, rather than queue every request behind it), adds foreign
keys NOT VALID then validates them, builds indexes CONCURRENTLY, and warns of operations that would rewrite or lock
a table for long (resonate_site/settings.py says why it does not refuse them).
"""

from django.db.backends.postgresql import base
from django_zero_downtime_migrations.backends.postgres.schema import DatabaseSchemaEditor


class SchemaEditor(DatabaseSchemaEditor):
    """django-pg-zero-downtime-migrations' schema editor, warning of a NOT NULL column added without a database
    default only to a table that holds rows: on an empty one (every table of a first `migrate`, where the released
    migrations of django-celery-beat add three such columns) nothing is rewritten or left without a value."""

    def _add_column_not_null(self, model, field):
        if not self._holds_rows(model._meta.db_table):
            return "NOT NULL"
        return super()._add_column_not_null(model, field)

    def _holds_rows(self, table):
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [self.quote_name(table)])
            if not cursor.fetchone()[0]:  # created by this migration, not yet run (sqlmigrate)
                return False
            cursor.execute(f"SELECT EXISTS (SELECT FROM {self.quote_name(table)})")
            return cursor.fetchone()[0]


class DatabaseWrapper(base.DatabaseWrapper):
    SchemaEditorClass = SchemaEditor
