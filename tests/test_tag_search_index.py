"""The index behind tag search: GIN (jsonb_path_ops) on promise tags on PostgreSQL, nothing on SQLite.

What a tag search answers is specified in tests/spec/test_p06_promise_search.py (and for /api/ in tests/test_api.py),
on both backends; here, that PostgreSQL reads the index for it and answers the same without it.
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from promises.models import Promise

RARE = {"customer": "c-7"}

# 20,000 promises in workflows of 10 (wf-0000, wf-0000.1 … wf-0000.9, …), a third resolved; 10 of them, spread over
# the workflows, carry the RARE tag.
FILL = """
INSERT INTO promises_promise (id, state, param, value, tags, timeout_at, created_at, timeout_armed, timer)
SELECT root || CASE WHEN n % 10 = 0 THEN '' ELSE '.' || n % 10 END,
       CASE WHEN n % 3 = 0 THEN 'resolved' ELSE 'pending' END, '{}', '{}',
       jsonb_build_object('resonate:origin', root, 'resonate:scope', CASE WHEN n % 2 = 0 THEN 'global' ELSE 'local' END)
         || CASE WHEN n % 2000 = 7 THEN '{"customer": "c-7"}' ELSE '{}' END::jsonb,
       10000, 0, false, false
FROM (SELECT n, 'wf-' || lpad((n / 10)::text, 4, '0') AS root FROM generate_series(0, 19999) AS n) AS placed
"""


@pytest.fixture
def many_promises(db):
    with connection.cursor() as cursor:
        cursor.execute(FILL)
        cursor.execute("ANALYZE promises_promise")


def search_sql(protocol, data):
    """The SELECT that promise.search sends for this request."""
    with CaptureQueriesContext(connection) as captured:
        assert protocol("promise.search", data, now=1).status == 200
    [sql] = [query["sql"] for query in captured.captured_queries if "@>" in query["sql"]]
    return sql


def plan(sql):
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(line for (line,) in cursor.fetchall())


def every_page(protocol, data):
    """The records of every page of a search, following its cursor."""
    records, cursor = [], None
    while True:
        answer = protocol("promise.search", {**data, "limit": 3, **({"cursor": cursor} if cursor else {})}, now=1)
        records += answer.data["promises"]
        cursor = answer.data.get("cursor")
        if cursor is None:
            return records


@pytest.mark.postgres
@pytest.mark.django_db
def test_promise_tags_have_a_gin_index_of_jsonb_path_ops_without_a_pending_list():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'promise_tags'")
        [(definition,)] = cursor.fetchall()
    assert definition.endswith("ON public.promises_promise USING gin (tags jsonb_path_ops) WITH (fastupdate=off)")


@pytest.mark.postgres
@pytest.mark.parametrize(
    "data",
    [
        {"tags": RARE},
        {"tags": {"resonate:origin": "wf-0123"}},
        {"tags": {**RARE, "resonate:origin": "wf-0200"}},
        {"tags": RARE, "state": "pending"},
        {"tags": RARE, "cursor": "wf-0500"},
        {"tags": RARE, "limit": 2},
    ],
    ids=["rare tag", "a workflow's origin", "two tags", "and a state", "after a cursor", "a short page"],
)
def test_a_search_by_a_tag_few_promises_carry_reads_the_tag_index(protocol, many_promises, data):
    assert "Bitmap Index Scan on promise_tags" in plan(search_sql(protocol, data))


@pytest.mark.postgres
def test_a_tag_search_answers_the_same_without_the_tag_index(protocol, many_promises):
    searches = [
        {"tags": RARE},
        {"tags": {"resonate:origin": "wf-0123"}},
        {"tags": {**RARE, "resonate:origin": "wf-0200"}},
        {"tags": RARE, "state": "resolved"},
        {"tags": {"customer": "nobody"}},
    ]
    indexed = [every_page(protocol, data) for data in searches]
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX promise_tags")  # rolled back with the test's transaction

    assert [every_page(protocol, data) for data in searches] == indexed
    assert [len(records) for records in indexed] == [10, 10, 1, 3, 0]


def promise_indexes():
    """{index name: its columns} of the promise table."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "promises_promise")
    return {name: about["columns"] for name, about in constraints.items() if about["index"]}


@pytest.mark.sqlite
@pytest.mark.django_db
def test_sqlite_has_no_index_on_tags_which_its_tag_search_could_not_use():
    assert ["tags"] not in promise_indexes().values()


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)
def test_rebuilding_the_promise_table_on_sqlite_builds_no_index_on_tags():
    """SQLite alters a table by building a new one with the model's indexes (as a later migration of promises would
    there): the GIN index would come back as a plain index on tags."""
    migrated = promise_indexes()
    with connection.schema_editor() as editor:
        editor._remake_table(Promise)
    assert promise_indexes() == migrated
    assert ["tags"] not in migrated.values()
