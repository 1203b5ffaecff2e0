"""Schema upkeep that Django's migrations cannot express on their own."""

from django.db import migrations

# The pattern-operator indexes (text_pattern_ops, varchar_pattern_ops) on columns that compare byte-wise (COLLATE
# "C"), by index name, for one table.
_PATTERN_TWINS = """
SELECT c.relname FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_opclass o ON o.oid = i.indclass[0]
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
JOIN pg_collation k ON k.oid = a.attcollation
WHERE i.indrelid = %s::regclass AND i.indnatts = 1
  AND o.opcname IN ('text_pattern_ops', 'varchar_pattern_ops') AND k.collname = 'C'
"""


def pattern_twins(connection, table):
    """The names of the pattern-operator indexes on byte-wise columns of `table` (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute(_PATTERN_TWINS, [table])
        return [name for (name,) in cursor.fetchall()]


def drop_pattern_twins(table):
    """A migration operation dropping the LIKE indexes Django adds beside the index of every unique or indexed
    text column on PostgreSQL, on the columns where they do nothing: those of IdField, which compare byte-wise
    (COLLATE "C"), so that their own index already serves `LIKE 'prefix%'`. Each cost a write per row written.
    Django would add them again if such a field changed; tests/test_database.py checks that none is left."""

    def drop(apps, schema_editor):
        connection = schema_editor.connection
        if connection.vendor == "postgresql":
            for name in pattern_twins(connection, table):
                schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')

    return migrations.RunPython(drop, migrations.RunPython.noop, elidable=False)
