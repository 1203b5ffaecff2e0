"""resonate_function(param): the function a promise runs, "func" in the JSON that param.data holds base64-encoded
(floor/lineage.py), NULL where it holds none. The console finds promises by function with it. PostgreSQL only:
SQLite connections register a Python function of the same name (floor/sqlite3/base.py)."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION resonate_function(param jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN convert_from(decode(param->>'data', 'base64'), 'UTF8')::jsonb->>'func';
EXCEPTION WHEN others THEN  -- not base64, not UTF-8, not JSON: no function
    RETURN NULL;
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS resonate_function(jsonb)"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("promises", "0005_promise_tags")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
