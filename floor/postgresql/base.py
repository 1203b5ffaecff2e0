"""Django's PostgreSQL backend, telling floor.rows when a transaction or a savepoint has rolled back, and migrating
without long locks.

psycopg deallocates every prepared statement of the session when it rolls back having prepared statements of
its own; the statements floor.rows.send_all prepared by name go with them (floor.rows.rolled_back).

Migrations run while the previous release serves (README: Rolling restart and upgrade): the schema editor is
django-pg-zero-downtime-migrations', which waits at most ZERO_DOWNTIME_MIGRATIONS_LOCK_TIMEOUT for a lock (a
migration that cannot get one fails, and is run again, rather than queue every request behind it), adds foreign
keys NOT VALID then validates them, builds indexes CONCURRENTLY, and warns of operations that would rewrite or lock
a table for long (resonate_site/settings.py says why it does not refuse them).
"""

from django.db.backends.postgresql import base
from django_zero_downtime_migrations.backends.postgres.schema import DatabaseSchemaEditor

from floor import rows


class DatabaseWrapper(base.DatabaseWrapper):
    SchemaEditorClass = DatabaseSchemaEditor

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            rows.rolled_back(self.alias)

    def _savepoint_rollback(self, sid):
        try:
            return super()._savepoint_rollback(sid)
        finally:
            rows.rolled_back(self.alias)
