"""Django's PostgreSQL backend, migrating without long locks.

Migrations run while the previous release serves (README: Rolling restart and upgrade): the schema editor is
django-pg-zero-downtime-migrations', which waits at most ZERO_DOWNTIME_MIGRATIONS_LOCK_TIMEOUT for a lock (a
migration that cannot get one fails, and is run again, rather than queue every request behind it), adds foreign
keys NOT VALID then validates them, builds indexes CONCURRENTLY, and warns of operations that would rewrite or lock
a table for long (resonate_site/settings.py says why it does not refuse them).
"""

from django.db.backends.postgresql import base
from django_zero_downtime_migrations.backends.postgres.schema import DatabaseSchemaEditor


class DatabaseWrapper(base.DatabaseWrapper):
    SchemaEditorClass = DatabaseSchemaEditor
