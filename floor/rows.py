"""Row statements for the hot paths, their SQL built once per model and database vendor.

Compiling an ORM query costs 0.5-0.8 ms of CPU here, four times the cost of running it
(bench/HISTORY.md), and every protocol request runs several. These helpers take the table and
columns from the model's metadata, cache the SQL text, and return ordinary model instances, so
callers keep working with models. Values become parameters as each field's own get_db_prep_save makes them
(`prepare`), by a shorter path for the field types the hot tables use.
"""

import asyncio
import contextvars
import json
import operator
import re
import threading
import weakref
from contextlib import contextmanager
from functools import cache
from typing import NamedTuple

import orjson
from django.db import DEFAULT_DB_ALIAS, IntegrityError, OperationalError, connections, models, router
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from floor import batching, functions, telemetry
from floor.counters import requests_committed_together
from floor.outages import lost_connection

DEFAULT = "default"


_connections = threading.local()  # per thread: {database alias: its connection object}


def connection_of(using=DEFAULT):
    """connections[using]: this thread's connection object of that database, looked up once per thread.

    Django keeps a thread's connection object for the thread's life (closing the connection keeps the object), but
    each lookup goes through asgiref's Local, which raises and catches an exception to learn that no event loop runs
    in the thread: about 1 µs, and a task.fulfill made 14 of them. Where an event loop runs in the thread (async
    code, whose connections are kept per task), the lookup is Django's."""
    if asyncio._get_running_loop() is None:
        found = _connections.__dict__.get(using)
        if found is None:
            found = _connections.__dict__[using] = connections[using]
        return found
    return connections[using]


_kept = threading.local()  # per thread: {database alias: _Kept}


def cursor_of(connection, single=False):
    """A cursor for one hot statement: on PostgreSQL a psycopg cursor kept per thread and connection, with
    Django's error mapping around it; Django's own cursor otherwise, and whenever someone watches the
    queries (DEBUG, CaptureQueriesContext, execute_wrapper).

    `single`: the SQL is one statement (_Single). It is then sent with its parameters apart (server-side binding),
    so that PostgreSQL can keep its plan: a statement the connection has run PREPARE_THRESHOLD times is prepared
    (resonate_site/settings.py), and goes with the BEGIN in front of it or the COMMIT after it in one round trip.
    Planning was most of a read's cost in the database: the fence's read planned in 0.13-0.17 ms and ran in 0.05.
    Several statements in one string (and a single one not prepared yet that carries BEGIN or COMMIT) go with
    client-side binding, which can send them together; send_all makes a function of those it sends often
    (floor.functions), called as one statement.

    Django's cursor wrapper costs about 40 µs of CPU per statement here (a new cursor each time, its
    wrappers). Errors still arrive as django.db errors, which floor.transactions reads to retry a lost race
    or a lost connection. A thread keeps the cursors of its current connection only: when Django replaces
    the connection (its age, a failure), the next statement opens cursors on the new one.

    A class of its own rather than a generator with contextlib's decorator: every protocol request opens one or
    more, and the generator's machinery (its object, its frame, a next() to enter and another to leave) cost 1.3%
    of a promise.create's instructions (bench/HISTORY.md, 2026-12-06 afternoon).
    """
    return _CursorOf(connection, single)


class _CursorOf:
    __slots__ = ("connection", "single", "closing", "django")

    def __init__(self, connection, single):
        self.connection, self.single, self.closing, self.django = connection, single, None, None

    def __enter__(self):
        connection = self.connection
        if _keeps_cursors(connection):
            kept = _kept_on(connection)
            opening = opens_transaction(kept.raw)  # attributes of the connection object: no error of the database
            if self.single:
                return _Single(kept, opening)
            return _Opening(kept.several, kept.raw) if opening else kept.several
        if _bare_sqlite(connection):
            raw = connection.connection
            if raw is None:
                connection.ensure_connection()
                raw = connection.connection
            self.closing = raw.cursor()
            return _Qmarked(self.closing)
        self.django = connection.cursor()
        return self.django.__enter__()

    def __exit__(self, kind, error, traceback):
        if self.django is not None:  # Django's cursor maps its errors itself, and closes
            return self.django.__exit__(kind, error, traceback)
        try:
            if kind is not None:  # a database's error raised as Django's, as Django's cursor raises it
                self.connection.wrap_database_errors.__exit__(kind, error, traceback)
        finally:
            if self.closing is not None:
                self.closing.close()  # a SELECT not read to its end would hold its snapshot until then
        return False


def send_all(connection, parts, results=True):
    """Send several statements, (sql, params) each, in one round trip: [the rows of each, or None for one that
    returns none]; None when `results` is false. Outside a transaction they run as one (implicit) transaction.
    A last part ("COMMIT", ()) ends the transaction (commit_held).

    Where cursors are kept, statements this process has sent together before go as one PL/pgSQL function made
    of their text (floor.functions), called as one statement bound server-side: PostgreSQL plans each statement
    once per session, and the client quotes nothing. Otherwise (and on SQLite, or a watched connection) they go
    as one client-bound query string, each planned at every call. By name, as PREPAREd statements in front of
    the string (until 2026-12-04), a settle and a task pair cost the server 7-16% more CPU and 4-7.5% of their
    throughput (bench/HISTORY.md, issue 26).
    """
    if not _keeps_cursors(connection):
        with connection.cursor() as cursor:
            cursor.execute("; ".join(sql for sql, _ in parts), [v for _, params in parts for v in params])
            return _results(cursor, len(parts)) if results else None
    commit = parts[-1][0] == "COMMIT"
    statements = parts[:-1] if commit else parts
    function = functions.function_for(connection, statements) if statements else None
    params = [v for _, p in statements for v in p]
    if function is None:
        with cursor_of(connection) as cursor:
            cursor.execute("; ".join(sql for sql, _ in parts), params)
            return _results(cursor, len(parts)) if results else None
    try:
        with cursor_of(connection, single=True) as cursor:
            cursor.execute(function.call, params, commit=commit)
            found = cursor.fetchall()
    except Exception as error:
        if functions.failed(function, error.__cause__):
            error.function_remade = True  # the operation may run again (floor.transactions.lost_race)
        raise
    if not results:
        return None
    return function.results(found) + ([None] if commit else [])


def _results(cursor, count):
    """The rows of each of the `count` statements a cursor has run (None for one that returns none)."""
    found = []
    for n in range(count):
        if n:
            cursor.nextset()
        result = cursor.pgresult  # its status, not `description`, which makes a Column per field
        found.append(cursor.fetchall() if result is not None and result.status == TUPLES_OK else None)
    return found


class _Kept:
    """What a thread keeps for one connection: the psycopg connection, its ClientCursor (Django's cursor class), a
    cursor binding server-side, and the statements it has prepared by name (_Single)."""

    __slots__ = ("raw", "several", "one", "pgconn", "transformer", "generators", "prepared", "names")

    def __init__(self, raw):
        from psycopg import Cursor, generators
        from psycopg.adapt import Transformer

        self.raw, self.several, self.one, self.pgconn = raw, raw.cursor(), Cursor(raw), raw.pgconn
        _binding_ints_as_bigint(self.one.adapters)  # the cursor's own copy of the connection's adapters
        self.transformer = Transformer(self.one)  # dumps parameters and loads rows as that cursor would
        self.generators = generators  # psycopg's exchanges with the server, which raw.wait runs
        self.prepared = {}  # (SQL, its parameters' types): its name once prepared, else the times it has run
        self.names = 0


def _binding_ints_as_bigint(adapters):
    """Bind every int as a bigint, what the hot statements' integer columns and arithmetic expect. psycopg binds an
    int as the smallest type that holds its value (a version of 1 as a smallint), so Django wraps each integer field's
    value in the wrapper of its column's type (Int8, Int4, Int2), and psycopg then binds it so; a wrapper built by its
    own Python __new__, six per row, was 2.3% of a promise.create's time (bench/HISTORY.md, 2026-12-06 (17:00)). With
    a bigint for every int, `prepare` passes ints as they are: a smaller column takes a bigint by PostgreSQL's
    assignment cast, as it takes a literal. Only the kept cursors bind so; a client-side cursor writes a literal. A
    statement sent server-side that passes an int to a function taking an integer (substr) casts it there: PostgreSQL
    narrows a bigint argument only when told to (the drop of unheard messages calls substr, bound client-side)."""
    from psycopg.adapt import PyFormat
    from psycopg.types.numeric import Int8

    assert adapters.get_dumper(Int8, PyFormat.AUTO) is adapters.get_dumper(Int8, PyFormat.BINARY)
    adapters.register_dumper(int, adapters.get_dumper(Int8, PyFormat.TEXT))
    adapters.register_dumper(int, adapters.get_dumper(Int8, PyFormat.BINARY))  # the last registered: AUTO's


def _kept_on(connection):
    """What this thread keeps for the connection, once the statements held for the commit have gone."""
    raw = connection.connection
    if raw is None:  # ensure_connection() itself costs a check for a running event loop and an environment read
        connection.ensure_connection()
        raw = connection.connection
    if _held.get():  # statements held for the commit go first: writes keep their order, and reads see them
        _send_held(connection)
    kept = _kept.__dict__.setdefault("cursors", {})
    found = kept.get(connection.alias)
    if found is None or found.raw is not raw or found.several.closed or found.one.closed:
        found = kept[connection.alias] = _Kept(raw)
    return found


def _keeps_cursors(connection):
    """Whether hot statements go through the kept psycopg cursors: PostgreSQL, and nobody watching the queries."""
    return connection.vendor == "postgresql" and not connection.queries_logged and not connection.execute_wrappers


def _bare_sqlite(connection):
    """Whether hot statements go to sqlite3's own cursor (_Qmarked): SQLite, and nobody watching the queries.

    Django's cursor costs more than the statement there: the check for a running event loop, its wrappers, and a
    regular expression turning each %s into ? at every call. The embedded mode spent a fifth of its interpreter on
    them in a create (py-spy, bench/HISTORY.md 2026-12-05)."""
    return connection.vendor == "sqlite" and not connection.queries_logged and not connection.execute_wrappers


class _Qmarked:
    """A sqlite3 cursor that takes the %s placeholders the hot statements are written with (sqlite3's are ?), the SQL
    converted once per text as Django's SQLite cursor converts it at every call. Errors still arrive as django.db
    errors: cursor_of wraps it as Django wraps its own."""

    __slots__ = ("cursor",)

    def __init__(self, cursor):
        self.cursor = cursor

    def execute(self, sql, params=None):
        if params is None:  # as Django's: the text as it is
            self.cursor.execute(sql)
            return
        converted = _QMARKED.get(sql)
        if converted is None:
            if len(_QMARKED) >= QMARKED_KEPT:  # texts with IN lists of every length: keep the cache bounded
                _QMARKED.clear()
            converted = _QMARKED[sql] = _FORMAT_QMARK.sub("?", sql).replace("%%", "%")
        self.cursor.execute(converted, params)

    def __getattr__(self, name):
        return getattr(self.cursor, name)


_QMARKED = {}  # SQL with %s: the same with ?
QMARKED_KEPT = 2048
_FORMAT_QMARK = re.compile(r"(?<!%)%s")  # Django's own rule (django.db.backends.sqlite3.base.FORMAT_QMARK_REGEX)


_held = contextvars.ContextVar("resonate_held_for_commit", default=None)  # see at_commit


@contextmanager
def holding_for_commit():
    """Within: at_commit may hold writes for the transaction's COMMIT (floor.transactions, on PostgreSQL)."""
    token = _held.set([])
    try:
        yield
    finally:
        _held.reset(token)


def at_commit(statements, using=DEFAULT):
    """Run these writes (Statements that return no rows) as the last of the transaction: held, and sent with its
    COMMIT in one round trip (commit_held), one round trip fewer. Any statement sent in the meantime sends them
    first, so writes keep their order and later reads see them; an error of theirs surfaces there or at the
    commit, as a failed commit, and the transaction rolls back. Outside floor.transactions' hold (SQLite, a
    watched connection, no transaction), they run now."""
    assert not any(statement.returns for statement in statements)
    held = _held.get()
    if held is None or not _keeps_cursors(connection_of(using)):
        run_all(statements, using)
    else:
        held.extend(statements)


def commit_held(using=DEFAULT):
    """Send the held writes, if any, followed by COMMIT, in one round trip (send_all). The transaction has then
    ended (Django's commit finds nothing to do: psycopg skips COMMIT once the server reports no transaction)."""
    if _held.get():
        _send_held(connection_of(using), commit=True)


def _send_held(connection, commit=False):
    held = _held.get()
    statements = list(held)
    held.clear()  # before sending: nothing is held then, and send_all does not come back here
    send_all(connection, [(s.sql, s.params) for s in statements] + ([("COMMIT", ())] if commit else []), results=False)


IDLE = 0  # psycopg.pq.TransactionStatus.IDLE (PQTRANS_IDLE), without importing psycopg where it is not installed
TUPLES_OK = 2  # psycopg.pq.ExecStatus.TUPLES_OK (PGRES_TUPLES_OK): a result with rows
BOUND_MAX = 65535  # parameters the extended protocol carries with one statement


class _Single:
    """One statement bound server-side, on the kept cursors of a connection; BEGIN in front of it when it opens the
    transaction (`opening`, as _Opening), COMMIT after it when asked (send_all's held writes), in the same round trip.

    A statement the connection has run `prepare_threshold` times (DATABASE_PREPARE_THRESHOLD, 5) is prepared by
    name there, and from then on sent by libpq's own call (PQsendQueryPrepared), its parameters dumped and its rows
    loaded by the psycopg Transformer a cursor would use: psycopg's cursor around the same call (its query object,
    its prepared-statement bookkeeping, its result checks) cost 37-48 µs of CPU a statement here (bench/HISTORY.md,
    2026-12-06). With BEGIN or COMMIT, they go together in libpq's pipeline mode (_pipelined), where psycopg's cursor
    could only send one query string, bound client-side and planned at every call. Errors are psycopg's, as its
    cursor raises them.

    psycopg's cursors run the statement until then; always when the threshold is off (a pooler in transaction mode
    loses named statements), while tracing (its spans come from psycopg's cursors), for a statement with more
    parameters than the protocol carries (then bound client-side, as a literal query: a heartbeat naming 70,000
    tasks), and beyond PREPARED_KEPT statements on one connection (IN lists of every length)."""

    __slots__ = ("kept", "opening", "cursor", "found")

    def __init__(self, kept, opening=False):
        self.kept, self.opening, self.cursor, self.found = kept, opening, None, None

    def execute(self, sql, params=(), commit=False):
        kept = self.kept
        counting = len(params) <= BOUND_MAX and kept.raw.prepare_threshold is not None and telemetry.tracer is None
        if counting and (prepared := _prepared(kept, sql, params)) is not None:
            if self.opening:
                kept.raw.autocommit = True  # psycopg sends no BEGIN of its own (_Opening)
            self.cursor, self.found = None, _run_prepared(kept, *prepared, self.opening, commit)
        elif self.opening or commit or len(params) > BOUND_MAX:  # bound client-side, in one query string
            self.cursor = _Opening(kept.several, kept.raw) if self.opening else kept.several
            self.cursor.execute(f"{sql}; COMMIT" if commit else sql, params)
        else:
            self.cursor = kept.one
            self.cursor.execute(sql, params, prepare=False if counting else None)  # counted by _prepared

    def fetchone(self):
        if self.cursor is not None:
            return self.cursor.fetchone()
        return self.found[0] if self.found else None

    def fetchall(self):
        return self.cursor.fetchall() if self.cursor is not None else self.found


PREPARED_KEPT = 512  # statements one connection counts or keeps prepared by name, at most

_AUTO = {}  # a count of parameters: that many PyFormat.AUTO, the formats a cursor asks its Transformer for


def _auto(count):
    formats = _AUTO.get(count)
    if formats is None:
        from psycopg.adapt import PyFormat

        formats = _AUTO[count] = [PyFormat.AUTO] * count
    return formats


def _prepared(kept, sql, params):
    """(name, parameters, their formats) for running the statement prepared by name on the kept connection, once
    it has run there `prepare_threshold` times (preparing it then); None before, each run counted."""
    transformer = kept.transformer
    values = transformer.dump_sequence(params, _auto(len(params)))
    key = (sql, transformer.types)  # psycopg's key too: a NULL has no type, a statement with one is another
    name = kept.prepared.get(key, 0)
    if type(name) is int:
        if name < kept.raw.prepare_threshold:
            if key in kept.prepared or len(kept.prepared) < PREPARED_KEPT:
                kept.prepared[key] = name + 1
            return None
        kept.names += 1
        name = f"_resonate_{kept.names}".encode()  # psycopg's own are _pg3_N
        text, _ = functions.numbered(sql, 0)
        kept.pgconn.send_prepare(name, text.encode(), param_types=key[1])
        _checked(kept, kept.raw.wait(kept.generators.execute(kept.pgconn)))
        kept.prepared[key] = name
    return name, values, transformer.formats


def _run_prepared(kept, name, values, formats, begin=False, commit=False):
    """Run a statement prepared by name, after BEGIN and before COMMIT when asked: its rows, as tuples ([] for a
    statement that returns none)."""
    if begin or commit:
        result = _pipelined(kept, name, values, formats, begin, commit)
    else:
        kept.pgconn.send_query_prepared(name, values, param_formats=formats)
        (result,) = _checked(kept, kept.raw.wait(kept.generators.execute(kept.pgconn)))
    if result.status != TUPLES_OK:
        return []
    transformer = kept.transformer
    transformer.set_pgresult(result)
    return transformer.load_rows(0, result.ntuples, tuple)


def _pipelined(kept, name, values, formats, begin, commit):
    """BEGIN (`begin`), the statement prepared by name, and COMMIT (`commit`) in one round trip, in libpq's pipeline
    mode: sent one after the other, then a Sync, their results read as they come. The statement's result; the first
    error among them raised (what follows an error is not run: PostgreSQL skips to the Sync)."""
    raw, pgconn, generators = kept.raw, kept.pgconn, kept.generators
    pgconn.enter_pipeline_mode()
    try:
        if begin:
            pgconn.send_query_params(b"BEGIN", None)
        pgconn.send_query_prepared(name, values, param_formats=formats)
        if commit:
            pgconn.send_query_params(b"COMMIT", None)
        pgconn.pipeline_sync()
        raw.wait(generators.send(pgconn))
        # each statement's results, then the Sync's
        answered = [raw.wait(generators.fetch_many(pgconn)) for _ in range(begin + 1 + commit + 1)]
    finally:
        try:
            pgconn.exit_pipeline_mode()  # refused while results are unread: an error above, the connection lost
        except Exception:
            raw.close()  # not to be used again: Django opens a new one for the next request
    for results in answered[:-1]:
        _checked(kept, results)
    return answered[begin][0]


COMMAND_OK, FATAL_ERROR, PIPELINE_ABORTED = 1, 7, 11  # psycopg.pq.ExecStatus's (libpq's PGRES_*)


def _checked(kept, results):
    """The results of one statement, unless one carries an error: then it is raised, as psycopg's cursor raises it. A
    statement a pipeline skipped after an error has none but PIPELINE_ABORTED: the error came before it."""
    for result in results:
        if result.status not in (TUPLES_OK, COMMAND_OK, PIPELINE_ABORTED):
            from psycopg import errors  # here, not per statement: an import statement costs a look-up each time

            if result.status == FATAL_ERROR:
                raise errors.error_from_result(result, encoding=kept.raw.info.encoding)
            raise errors.InternalError(f"unexpected result status from a statement: {result.status}")
    return results


def opens_transaction(raw):
    """Whether the next statement on this psycopg connection starts the transaction Django has begun (atomic() has
    turned autocommit off, and no statement has run since), at the default isolation level."""
    return not raw.autocommit and raw.pgconn.transaction_status == IDLE and raw.isolation_level is None


class _Opening:
    """A kept cursor whose next statement opens the transaction: its BEGIN goes in front of it, in one query string.

    psycopg would send BEGIN as a round trip of its own before the statement. Here the connection is put in
    autocommit first (allowed while no transaction is open), so psycopg sends nothing of its own, and the
    statement opens the transaction itself. Django's commit() or rollback() ends it as any other: psycopg sends
    COMMIT or ROLLBACK whenever a transaction is open, and Django turns autocommit back on when atomic() ends.
    """

    def __init__(self, cursor, raw):
        self.cursor, self.raw = cursor, raw

    def execute(self, sql, params=()):
        self.raw.autocommit = True
        self.cursor.execute(f"BEGIN; {sql}", params)
        self.cursor.nextset()  # past BEGIN's result, to the statement's

    def __getattr__(self, name):
        return getattr(self.cursor, name)


def prepare(field, value, connection):
    """The parameter for storing `value` in `field`: what field.get_db_prep_save(value, connection) returns.

    Django's own call costs a few µs a field through its chain of methods, and a create writes 31 fields. For the
    values the hot tables hold (str, int, bool, JSON), the same parameter comes from one function picked once per
    field and vendor; anything else goes through the field's own method. One difference on PostgreSQL: an integer
    stays an int, without the wrapper of its column's type (Int8, Int4, Int2), as the cursors that bind it
    server-side bind every int as a bigint (_binding_ints_as_bigint). Another: a JSON value is its JSON text, a str,
    where Django wraps it in psycopg's Jsonb; psycopg sends a str as a parameter of no declared type, which the
    column it goes to (or the statement's cast) makes jsonb, and its C code dumps it, where Jsonb's dumper is Python
    (five JSON parameters a create: 9.4 against 3.4 µs in a loop). tests/test_rows.py checks both paths give the
    same parameters for every concrete field of the protocol's models.
    """
    return _preparer(field.model, field.attname, connection.vendor)(value, connection)


def row_params(row, connection):
    """The parameters of an INSERT of this model instance's row (the fields of _fields, in order)."""
    return _row_reader(type(row), connection.vendor).params(row, connection)


@cache
def _row_reader(model, vendor):
    return _readers(model, tuple(f.attname for f in _fields(model)[0]), vendor)


@cache  # by model and attname: a Django field hashes slowly (a tuple built per call)
def _preparer(model, attname, vendor):
    field = next(f for f in model._meta.concrete_fields if f.attname == attname)
    own = field.target_field if isinstance(field, models.ForeignKey) else field
    kind = own.get_internal_type()
    slow = field.get_db_prep_save
    if kind in ("CharField", "TextField") and type(own).get_prep_value in _TEXT_PREP:

        def text(value, connection):  # a str subclass (a TextChoices member) too: to_python returns it as it is
            return value if value is None or isinstance(value, str) else slow(value, connection)

        text.passes = frozenset({str, type(None)})
        return text
    if kind == "BooleanField" and type(own).get_prep_value is models.BooleanField.get_prep_value:

        def boolean(value, connection):
            return value if type(value) is bool or value is None else slow(value, connection)

        boolean.passes = frozenset({bool, type(None)})
        return boolean
    if kind in _INTEGERS and type(own).get_prep_value is models.IntegerField.get_prep_value:

        def integer(value, connection):  # on PostgreSQL the kept cursors bind it as a bigint (_binding_ints_as_bigint)
            if type(value) is int or value is None:
                return value
            return int(value) if isinstance(value, int) else slow(value, connection)  # as get_prep_value's int()

        integer.passes = frozenset({int, type(None)})
        return integer
    if kind == "JSONField" and own.encoder is None and _plain_json(own):

        def json_text(value, connection):  # as adapt_json_value, in orjson's text (_dumps_text); None is SQL NULL
            if value is None:
                return None
            return _dumps_text(value) if type(value) in _JSON_TYPES else slow(value, connection)

        return json_text
    return slow


_TEXT_PREP = (models.CharField.get_prep_value, models.TextField.get_prep_value)
_INTEGERS = ("IntegerField", "BigIntegerField", "SmallIntegerField")
_JSON_TYPES = (dict, list, str, int, bool, float)


def _plain_json(field):
    return type(field).get_prep_value is models.JSONField.get_prep_value and (
        type(field).get_db_prep_value is models.JSONField.get_db_prep_value
    )


def _dumps_text(value):
    """JSON text for a JSON parameter: orjson's, without the standard library's spaces (json.dumps was 5% of a
    create's time in the embedded mode), or the standard library's for what orjson refuses (integers past 64 bits).
    Read back, both give the same value: nothing compares the stored text."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


def quote(name):
    return f'"{name}"'


@cache
def _fields(model):
    """(the fields an INSERT writes: all but an auto-increment id, the attnames of every column in order)."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key or not f.auto_created]
    return tuple(fields), tuple(f.attname for f in model._meta.concrete_fields)


@cache
def _select(model, where_column, lock):
    sql = f"SELECT {columns(model)} FROM {quote(model._meta.db_table)} WHERE {quote(where_column)} = %s"
    return sql + " FOR UPDATE" if lock else sql


def _locks(connection, lock):
    return lock and connection.features.has_select_for_update


_converter_cache = weakref.WeakKeyDictionary()  # {connection: {model: converters}}; gone with its connection


def _converters(model, connection):
    """The columns whose raw database values the ORM converts (JSON text → objects, …), with the functions it
    applies: [(index, column, functions)].

    Kept per connection object: connections belong to one thread, and so do their converters (some are
    bound to the connection's own operations object). A JSON column is read by orjson, where Django's
    JSONField uses the json module; whatever orjson would read differently goes to the field's own converter
    (`_json_reader`; tests/test_rows.py compares the two).
    """
    cache = _converter_cache.get(connection)
    if cache is None:
        cache = _converter_cache[connection] = {}
    if model not in cache:
        cache[model] = []
        for index, field in enumerate(model._meta.concrete_fields):
            column = field.get_col(model._meta.db_table)
            functions = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            if isinstance(field, models.JSONField) and field.decoder is None:
                functions = [
                    _json_reader(function) if _is_json_loads(function, field) else function for function in functions
                ]
            if functions:
                cache[model].append((index, column, functions))
    return cache[model]


def _is_json_loads(function, field):
    return getattr(function, "__func__", None) is models.JSONField.from_db_value and function.__self__ is field


# 19 digits in a row may be an integer past 64 bits, which orjson reads as a float: the json module keeps it exact.
_LONG_DIGITS = re.compile(r"\d{19}")


def _json_reader(from_db_value):
    def read_json(value, expression, connection):
        if value is None:
            return None
        if type(value) is str and not _LONG_DIGITS.search(value):
            try:
                return orjson.loads(value)
            except ValueError:  # not JSON orjson reads (a lone surrogate, a float past its range): the json module
                pass
        return from_db_value(value, expression, connection)

    return read_json


def _instance(model, row, connection, using):
    values = list(row)
    for index, column, converters in _converters(model, connection):
        for function in converters:
            values[index] = function(values[index], column, connection)
    attnames = _fields(model)[1]
    if _signalled(model) or len(values) != len(attnames):
        return model.from_db(using, attnames, values)
    instance = model.__new__(model)  # what from_db does for a whole row: its attributes set from the columns
    instance.__dict__.update(zip(attnames, values, strict=True))
    state = instance._state = ModelState()
    state.adding, state.db = False, using
    return instance


def new(model, **values):
    """model(**values), unsaved: what Model.__init__ does with keyword arguments (a field's keyword, or its
    default; a relation's keyword through its descriptor), without its per-field lookups, which cost 9-12 µs
    an instance here, three for each create. A relation given its related instance (a task's `promise=`) is set
    as its descriptor sets it (_relate), without the descriptor's checks that cannot fail here. tests/test_rows.py
    compares the two on every protocol model, the related instance included."""
    constants, factories, names, relations, plain = _new_plan(model)
    if _signalled(model) or not names.issuperset(values):
        return model(**values)  # someone listens to its signals, or it raises Model.__init__'s TypeError
    instance = model.__new__(model)
    attributes = instance.__dict__
    attributes.update(constants)
    for attname, factory in factories:
        attributes[attname] = factory()
    instance._state = ModelState()
    if plain.issuperset(values):  # what setattr would do for each: no descriptor of the class takes them
        attributes.update(values)
        return instance
    related = None  # the keyword of a relation given its related instance: one at most
    for name, value in values.items():
        if name not in relations:
            setattr(instance, name, value)
        elif related is not None or relations[name].attname in values:
            return model(**values)  # the order of their setting would matter: Model.__init__'s own order
        else:
            related = name
    if related is not None and not _relate(instance, relations[related], values[related]):
        setattr(instance, related, values[related])
    return instance


class _Relation(NamedTuple):
    """A forward relation on one column (a ForeignKey or OneToOneField), as its descriptor sets it."""

    model: type  # the related model: only an instance of exactly it is set here
    attname: str  # the column's attribute (promise_id)
    target: str  # the related instance's attribute that the column takes (id)
    cache_name: str  # the instance's cache of the related instance, and (a one-to-one) the related's of it
    reverse_cache_name: str | None


def _relate(instance, relation, value):
    """What ForwardManyToOneDescriptor.__set__ (and ForwardOneToOneDescriptor's) does on a new instance, given the only
    relation set on it, with no database router: the two instances take the related one's database, or the default
    (Django's routing without routers), so allow_relation's comparison of their databases cannot refuse. False, with
    nothing changed, for a value not of exactly the related model, or with a router: the caller goes through the
    descriptor."""
    if type(value) is not relation.model or router.routers:
        return False
    related = value._state
    instance._state.db = related.db = related.db or DEFAULT_DB_ALIAS
    instance.__dict__[relation.attname] = getattr(value, relation.target)
    instance._state.fields_cache[relation.cache_name] = value
    if relation.reverse_cache_name is not None:
        related.fields_cache[relation.reverse_cache_name] = instance
    return True


@cache
def _new_plan(model):
    """(defaults that are values, (attname, default factory) pairs, the keywords Model.__init__ takes, {name:
    _Relation} of its forward relations on one column, the keywords that setattr puts in the instance's __dict__ as
    they are: a field's attname that no data descriptor of the class (a relation's, a property, a key's
    ForeignKeyDeferredAttribute) takes)."""
    constants, factories, names, relations = {}, [], set(model._meta._property_names), {}
    for field in model._meta.concrete_fields:
        names.update((field.name, field.attname))
        if field.has_default() and callable(field.default):
            factories.append((field.attname, field.default))
        else:
            constants[field.attname] = field.get_default()
        one_column = isinstance(field, models.ForeignKey) and len(field.related_fields) == 1
        if one_column and not field.remote_field.parent_link:  # a parent link's descriptor sets the pk's parents too
            ((own, target),) = field.related_fields
            reverse = None if field.remote_field.multiple else field.remote_field.cache_name
            model_of = field.related_model
            relations[field.name] = _Relation(model_of, own.attname, target.attname, field.cache_name, reverse)
    plain = frozenset(f.attname for f in model._meta.concrete_fields if not _data_descriptor(model, f.attname))
    return constants, tuple(factories), frozenset(names), relations, plain


def _data_descriptor(model, name):
    """Whether setting this attribute on an instance goes through its class: a data descriptor found on the class
    (setattr looks there first)."""
    found = next((vars(klass)[name] for klass in model.__mro__ if name in vars(klass)), None)
    return hasattr(type(found), "__set__") or hasattr(type(found), "__delete__")


def _signalled(model):
    """Whether anything listens to the model's pre_init or post_init: then Model.__init__ must send them. Nothing
    listens to either signal in the server: their empty lists say so without has_listeners' per-sender lookup."""
    if not pre_init.receivers and not post_init.receivers:
        return False
    return pre_init.has_listeners(model) or post_init.has_listeners(model)


def fetch(model, pk, lock=False, using=DEFAULT):
    """The row with this primary key as a model instance, or None; `lock` takes its row lock."""
    connection = connection_of(using)
    sql = _select(model, model._meta.pk.column, _locks(connection, lock))
    with cursor_of(connection, single=True) as cursor:
        cursor.execute(sql, [pk])
        row = cursor.fetchone()
    return None if row is None else _instance(model, row, connection, using)


def fetch_all(model, pks, lock=False, descending=False, using=DEFAULT):
    """The rows with these primary keys, ordered by key (locked in that order when `lock`)."""
    pks = sorted(set(pks))
    if not pks:
        return []
    connection = connection_of(using)
    with cursor_of(connection, single=True) as cursor:
        cursor.execute(_select_all(model, len(pks), descending, _locks(connection, lock)), pks)
        rows = cursor.fetchall()
    return [_instance(model, row, connection, using) for row in rows]


def reading(model, pks):
    """The read, (sql, params), of the rows of `model` with these keys, as lock_then_query takes it."""
    return _select_all(model, len(pks)), list(pks)


def instances(model, found, using=DEFAULT):
    """Rows the model's columns were read for (as `reading` reads them), as model instances."""
    connection = connection_of(using)
    return [_instance(model, row, connection, using) for row in found]


def lock_then_query(model, pks, reads, using=DEFAULT):
    """Lock the rows of `model` with these keys (in descending key order), then run each read, (sql, params):
    ([locked instances], [the rows of each read]).

    The reads start once every lock is held, so they see what the holders of those locks committed: under READ
    COMMITTED a row read by the statement that waited for a lock comes from that statement's older snapshot.
    On PostgreSQL all go in one round trip (send_all), each statement with its own snapshot.
    """
    return _locking_reads(model, pks, reads, None, using)[1:]


def run_all_then_lock(statements, model, pks, reads, using=DEFAULT):
    """run_all(statements), then lock_then_query(model, pks, reads): ([the rows of each statement], [locked
    instances], [the rows of each read]). On PostgreSQL all in one round trip (send_all): the locks are
    asked for once the statements' writes are done, and the reads start once the locks are held."""
    if connection_of(using).vendor != "postgresql":
        return (run_all(statements, using), *lock_then_query(model, pks, reads, using))
    return _locking_reads(model, pks, reads, statements, using)


def _locking_reads(model, pks, reads, first, using):
    """lock_then_query, after the statements `first` (PostgreSQL only): (their rows or None, locked, found)."""
    pks = sorted(set(pks))
    connection = connection_of(using)
    locking = _select_all(model, len(pks), True, _locks(connection, True))
    if connection.vendor != "postgresql":
        with cursor_of(connection) as cursor:
            cursor.execute(locking, pks)
            locked, found = cursor.fetchall(), []
            for sql, params in reads:
                cursor.execute(sql, params)
                found.append(cursor.fetchall())
        return None, instances(model, locked, using), found
    head = [_in_one(first)] if first else []
    results = send_all(connection, [*head, (locking, pks), *reads])
    before = _by_statement(first, results.pop(0)) if first else None
    return before, instances(model, results[0], using), results[1:]


@cache
def _select_all(model, count, descending=False, lock=False):
    key = quote(model._meta.pk.column)
    sql = (
        f"SELECT {columns(model)} FROM {quote(model._meta.db_table)} WHERE {key} IN ({placeholders(range(count))})"
        f" ORDER BY {key} {'DESC' if descending else 'ASC'}"
    )
    return sql + " FOR UPDATE" if lock else sql


def _into(model):
    return f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in _fields(model)[0])})"


def _conflict(on_conflict):
    if on_conflict is None:
        return ""
    if on_conflict == "nothing":
        return " ON CONFLICT DO NOTHING"
    key, updated = on_conflict
    assignments = ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in updated)
    return f" ON CONFLICT ({quote(key)}) DO UPDATE SET {assignments}"


@cache
def _insert(model, on_conflict):
    return f"{_into(model)} VALUES ({placeholders(_fields(model)[0])}){_conflict(on_conflict)}"


def insert(instance, on_conflict=None, using=DEFAULT):
    """INSERT the instance's row. on_conflict: None (raise), "nothing", or (unique column, columns to update)."""
    insert_all([instance], on_conflict, using)


def insert_all(instances, on_conflict=None, using=DEFAULT):
    """INSERT the rows of several instances of one model in one statement (see insert)."""
    if not instances:
        return
    sql, params, _ = inserting(instances, on_conflict, using)
    with cursor_of(connection_of(using), single=True) as cursor:
        cursor.execute(sql, params)


def inserting(instances, on_conflict=None, using=DEFAULT):
    """insert_all as a Statement, for run_all; the instances count as saved from here."""
    connection = connection_of(using)
    model = type(instances[0])
    fields, _ = _fields(model)
    row = f"({placeholders(fields)})"
    head, _, tail = _insert(model, on_conflict).partition(f" VALUES {row}")
    params = [value for instance in instances for value in row_params(instance, connection)]
    for instance in instances:
        instance._state.adding = False
        instance._state.db = using
    return Statement(f"{head} VALUES {', '.join([row] * len(instances))}{tail}", params)


def insert_unless_exists(instance, dependents=(), using=DEFAULT):
    """INSERT the instance's row and then each dependent row (rows that belong to it: its task, its
    messages), unless a row with the instance's primary key exists: then nothing is written and that
    row is returned (as a model instance). None when everything was inserted.

    A dependent meets an existing row of its own as its model's `insert_on_conflict` says (see insert;
    the outbox's setMessage replaces), or raises. PostgreSQL: one statement (data-modifying CTEs), which
    needs no transaction of its own. A row that another transaction committed after the statement's
    snapshot was taken is neither inserted over nor seen; the statement then runs again, with a fresh
    snapshot. Elsewhere: a read, then the INSERTs (the caller holds a transaction).

    On a thread that sends creates together (send_creates_together), outside a transaction, the rows go first in
    one statement with those of the other such threads of the process that insert at the same moment
    (floor.batching): when that statement inserted them, nothing more is sent; when it did not (the key exists, the
    statement failed for a reason of its own, or none took them within batching.WAIT_S), the statement of its own
    above runs. Should that statement lose its connection, each of them raises as a lost connection: it may have
    committed (LostElsewhere on the threads whose own connection was not the one lost).
    """
    connection = connection_of(using)
    model = type(instance)
    if connection.vendor != "postgresql":  # SQLite: the caller's transaction holds the one writer
        with cursor_of(connection) as cursor:
            cursor.execute(_insert_unless_key(model), row_params(instance, connection))
            if cursor.fetchone() is None:  # the key exists: that row, and nothing written
                cursor.execute(_select(model, model._meta.pk.column, False), [instance.pk])
                return _instance(model, cursor.fetchone(), connection, using)
            for dependent in dependents:
                statement = inserting([dependent], getattr(dependent, "insert_on_conflict", None), using)
                cursor.execute(statement.sql, statement.params)
        instance._state.adding, instance._state.db = False, using
        return None
    shape = (model, tuple([type(d) for d in dependents]), using)
    params = [value for row in (instance, *dependents) for value in row_params(row, connection)]
    if _together_here.on and in_autocommit(connection):
        inserted = _together.run(shape, instance.pk, (instance.pk, params, connection))
        if isinstance(inserted, BaseException):
            raise inserted  # its statement's connection lost (LostElsewhere: not this thread's), or stopping
        if inserted:
            for row in (instance, *dependents):
                row._state.adding, row._state.db = False, using
            return None
    sql = _insert_unless_exists(*shape)
    params.append(instance.pk)
    for _ in range(3):
        with cursor_of(connection, single=True) as cursor:
            cursor.execute(sql, params)
            found = cursor.fetchone()
        if found is None:
            continue  # committed by another after this statement's snapshot: look again
        if not found[0]:
            return _instance(model, found[1:], connection, using)
        for row in (instance, *dependents):
            row._state.adding, row._state.db = False, using
        return None
    raise IntegrityError(f"{model._meta.db_table} {instance.pk!r} kept conflicting with a row it could not read")


class _TogetherHere(threading.local):
    on = False


_together_here = _TogetherHere()


def in_autocommit(connection):
    """Whether a statement on this connection would be a transaction of its own (a thread's connection not opened yet
    opens in autocommit: settings_dict's AUTOCOMMIT)."""
    if connection.in_atomic_block:
        return False
    return connection.autocommit if connection.connection is not None else connection.settings_dict["AUTOCOMMIT"]


def send_creates_together():
    """Let this thread's creates go in one statement with those of other such threads (insert_unless_exists): for the
    protocol's threads of a server process, which answer requests at the same moment. Not for a thread that must
    never wait on another's statement (an event loop's)."""
    _together_here.on = True


def _send_together(shape, items):
    """insert_unless_exists's rows of several threads, (key, parameters, connection) each, in one statement on the
    first one's connection (the sending thread's own): for each, True when it was inserted, False when its thread
    must send its own statement; or, the connection lost, the error for the first and a LostElsewhere for each of the
    others."""
    model, dependents, using = shape
    connection = items[0][2]
    order = sorted(range(len(items)), key=lambda n: items[n][0])  # every statement takes the rows' locks in one order
    counts = [len(_fields(model)[0]), *(len(_fields(d)[0]) for d in dependents)]
    params, start = [], 0
    for index, count in enumerate(counts):
        for n in order:
            key, values, _ = items[n]
            if index:
                params.append(key)  # a dependent row's owner
            params.extend(values[start : start + count])
        start += count
    try:
        with cursor_of(connection, single=True) as cursor:
            cursor.execute(_insert_all_unless_exist(model, dependents, using, len(items)), params)
            inserted = {row[0] for row in cursor.fetchall()}
    except Exception as error:
        if lost_connection(error):
            lost = f"the connection of a statement sent with this one's rows was lost: {error}"
            return [error] + [LostElsewhere(lost) for _ in items[1:]]  # one each: each thread raises its own
        return [False] * len(items)  # its own reason: each sends its own statement, and only its own fails
    if len(items) > 1:
        requests_committed_together(len(inserted))
    return [key in inserted for key, _, _ in items]


class LostElsewhere(OperationalError):
    """What insert_unless_exists raises on a thread whose rows went in another thread's statement, whose connection
    was lost: a lost connection (outages.lost_connection) as far as this request knows, as its rows may have been
    committed, while this thread's own connection is as good as it was (run_atomically runs the operation again on
    it; the thread that lost its connection reports the loss)."""


def _cast_placeholders(model, connection):
    """ "%s::text, %s::jsonb, …": a placeholder for each of the model's row columns, cast to its column's type (a row
    built in a SELECT or a VALUES list of a CTE, whose types PostgreSQL cannot take from the table)."""
    return ", ".join(f"%s::{f.cast_db_type(connection)}" for f in _fields(model)[0])


@cache
def _insert_all_unless_exist(model, dependents, using, count):
    """_insert_unless_exists for `count` rows of the model, each with its dependents: each dependent's row carries its
    owner's key first, and is inserted when its owner was. Returns the keys inserted."""
    connection = connection_of(using)
    key = quote(model._meta.pk.column)
    rows = ", ".join([f"({_cast_placeholders(model, connection)})"] * count)
    steps = [f"head AS ({_into(model)} VALUES {rows} ON CONFLICT ({key}) DO NOTHING RETURNING {key})"]
    owner = model._meta.pk.cast_db_type(connection)
    for n, dependent in enumerate(dependents):
        names = ", ".join(f"c{i}" for i in range(len(_fields(dependent)[0])))
        values = ", ".join([f"(%s::{owner}, {_cast_placeholders(dependent, connection)})"] * count)
        on_conflict = _conflict(getattr(dependent, "insert_on_conflict", None))
        steps.append(
            f"d{n} AS ({_into(dependent)} SELECT {names} FROM (VALUES {values}) AS v(owner, {names})"
            f" WHERE owner IN (SELECT {key} FROM head){on_conflict} RETURNING 1)"
        )
    return f"WITH {', '.join(steps)} SELECT {key} FROM head"


_together = batching.Together(_send_together, alone=False)


@cache
def _insert_unless_key(model):
    """An INSERT of the model's row that writes nothing when its key exists, and returns a row when it wrote one."""
    return f"{_insert(model, None)} ON CONFLICT ({quote(model._meta.pk.column)}) DO NOTHING RETURNING 1"


@cache
def _insert_unless_exists(model, dependents, using):
    connection = connection_of(using)
    key = quote(model._meta.pk.column)
    row = _cast_placeholders(model, connection)
    steps = [f"head AS ({_into(model)} VALUES ({row}) ON CONFLICT ({key}) DO NOTHING RETURNING 1)"]
    for n, dependent in enumerate(dependents):
        on_conflict = _conflict(getattr(dependent, "insert_on_conflict", None))
        values = _cast_placeholders(dependent, connection)
        steps.append(f"d{n} AS ({_into(dependent)} SELECT {values} FROM head{on_conflict} RETURNING 1)")
    nulls = ", ".join("NULL" for _ in model._meta.concrete_fields)
    return (
        f"WITH {', '.join(steps)} SELECT true, {nulls} FROM head"
        f" UNION ALL SELECT false, {columns(model)} FROM {quote(model._meta.db_table)} WHERE {key} = %s"
    )


def update(instance, *attnames, using=DEFAULT):
    """UPDATE the given fields of the instance's row."""
    sql, params, _ = setting(instance, *attnames, pks=[instance.pk], using=using)
    execute(sql, params, using)


class Statement(NamedTuple):
    """One hand-written statement, for run_all: its SQL, its parameters, and whether it returns rows."""

    sql: str
    params: list
    returns: bool = False


def setting(values, *attnames, pks, using=DEFAULT):
    """UPDATE the rows with these primary keys, setting the given fields to what they are on `values` (an
    instance of the model, unsaved: its fields carry the values), as a Statement for run_all."""
    connection = connection_of(using)
    fields, sql = _setting(type(values), attnames, len(pks))
    params = [prepare(f, getattr(values, f.attname), connection) for f in fields]
    params.extend(pks)
    return Statement(sql, params)


@cache
def _setting(model, attnames, count):
    fields = [model._meta.get_field(name) for name in attnames]
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in fields)
    key = quote(model._meta.pk.column)
    where = f"{key} = %s" if count == 1 else f"{key} IN ({placeholders(range(count))})"
    return fields, f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {where}"


def taking(model, column, values, *returned):
    """DELETE the model's rows whose `column` is one of `values`, returning the `returned` columns of each (or, with
    none named, nothing: a Statement at_commit can hold)."""
    return Statement(_taking(model, column, len(values), returned), list(values), returns=bool(returned))


@cache
def _taking(model, column, count, returned):
    returning = f" RETURNING {', '.join(quote(c) for c in returned)}" if returned else ""
    table, where = quote(model._meta.db_table), placeholders(range(count))
    return f"DELETE FROM {table} WHERE {quote(column)} IN ({where}){returning}"


def updating(instances, *attnames, by=None, only=None, using=DEFAULT):
    """UPDATE the given fields of the rows of these instances (of one model), each to its own values.

    A row is matched by its primary key, or by the fields `by` (each instance's own values of them); `only`,
    {field name: value}, adds conditions every row must meet.
    """
    connection = connection_of(using)
    model = type(instances[0])
    only = only or {}
    sql, attnames = _updating(model, attnames, tuple(by or ()), tuple(only), len(instances), using)
    reader = _readers(model, attnames, connection.vendor)
    params = [value for instance in instances for value in reader.params(instance, connection)]
    params += [prepare(model._meta.get_field(name), value, connection) for name, value in only.items()]
    return Statement(sql, params)


@cache
def _updating(model, attnames, by, conditions, count, using):
    """updating's SQL for this shape (built once: it casts every value, and a field's cast type is slow to ask
    for), and the attnames whose values it takes from each row, in order."""
    connection = connection_of(using)
    matched = [model._meta.get_field(name) for name in by] if by else [model._meta.pk]
    fields = [model._meta.get_field(name) for name in attnames]
    table = quote(model._meta.db_table)
    row = f"({', '.join(f'CAST(%s AS {f.cast_db_type(connection)})' for f in (*matched, *fields))})"
    assignments = ", ".join(f"{quote(f.column)} = v.column{len(matched) + n + 1}" for n, f in enumerate(fields))
    where = [f"{table}.{quote(f.column)} = v.column{n + 1}" for n, f in enumerate(matched)]
    where += [f"{table}.{quote(model._meta.get_field(name).column)} = %s" for name in conditions]
    sql = f"UPDATE {table} SET {assignments} FROM (VALUES {', '.join([row] * count)}) v WHERE {' AND '.join(where)}"
    return sql, tuple(f.attname for f in (*matched, *fields))


@cache
def _readers(model, attnames, vendor):
    """The parameters of these fields of a row, each as its _preparer makes it (as row_params does for all)."""
    return _Reader(attnames, [_preparer(model, attname, vendor) for attname in attnames])


class _Reader:
    """Reads a row's attributes in one call, and prepares each value unless its type passes unchanged (a str for
    a text field, a bool for a boolean one: the preparer would return it as it is): a create's 31 parameters
    take 14 preparer calls instead of 62 calls."""

    def __init__(self, attnames, preparers):
        get = operator.attrgetter(*attnames)
        self.get = get if len(attnames) > 1 else lambda row: (get(row),)
        self.steps = tuple((getattr(prepare, "passes", frozenset()), prepare) for prepare in preparers)

    def params(self, row, connection):
        return [
            value if type(value) in passes else prepare(value, connection)
            for value, (passes, prepare) in zip(self.get(row), self.steps, strict=True)
        ]


def run_all(statements, using=DEFAULT):
    """Run several statements as one step; the rows of each (as dicts by column; [] for one that returns none).

    PostgreSQL: one statement, each a data-modifying CTE of it, all seeing the same snapshot: none sees
    what another writes, and no two may write the same row (callers keep their rows apart). Elsewhere:
    one after the other, in order.
    """
    connection = connection_of(using)
    if connection.vendor != "postgresql":
        found = []
        with cursor_of(connection) as cursor:
            for sql, params, returns in statements:
                cursor.execute(sql, params)
                names = [column[0] for column in cursor.description] if returns else []
                found.append([dict(zip(names, row, strict=True)) for row in cursor.fetchall()] if returns else [])
        return found
    return _by_statement(statements, query(*_in_one(statements), using))


def _in_one(statements):
    """run_all's statement on PostgreSQL, (sql, params): each statement a data-modifying CTE, and the rows they
    return as (statement's index, row as JSON)."""
    steps = ", ".join(f"s{n} AS ({statement.sql})" for n, statement in enumerate(statements))
    returned = [n for n, statement in enumerate(statements) if statement.returns]
    rows_of = " UNION ALL ".join(f"SELECT {n}, row_to_json(s{n})::text FROM s{n}" for n in returned) or "SELECT 0, NULL"
    return f"WITH {steps} {rows_of}", [v for statement in statements for v in statement.params]


HELD = "floor.held"  # transaction-local setting: the key lock_then_write's lock found (and so holds)


def lock_then_write(model, pk, condition, statements, using=DEFAULT):
    """Lock the row of `model` with this key, then make run_all's statements only if `condition`, a query (sql,
    params), finds a row once the lock is held; PostgreSQL only, one round trip: ([the locked instance] or [],
    whether the statements wrote).

    For a write decided by what a lock protects. The condition and the writes are one statement (data-modifying
    CTEs), started once the lock is held, so they share a snapshot in which what the lock protects holds. They
    write only if the lock found the row: a row the lock could not see (inserted by a transaction that committed
    after the lock's statement began) is visible to the writes' later snapshot, but not locked, so what the
    condition read of it may change before the writes. The lock notes its key in a transaction-local setting
    (HELD), which the writes ask for; the two go together (send_all), in one transaction. The condition, and each
    statement, must end in the conditions of its WHERE clause, all ANDed (setting, updating, scrubbing); the
    statements return nothing.
    """
    connection = connection_of(using)
    assert connection.vendor == "postgresql"
    sql, params = condition
    steps = []
    for n, statement in enumerate(statements):
        where = statement.sql.rpartition(" WHERE ")[2]
        assert where != statement.sql and " OR " not in where and " RETURNING " not in where, statement.sql
        steps.append(f"s{n} AS ({statement.sql} AND EXISTS (SELECT 1 FROM provided))")
    writes = (
        f"WITH provided AS MATERIALIZED ({sql} AND current_setting('{HELD}', true) = %s), {', '.join(steps)}"
        " SELECT count(*) FROM provided"
    )
    writes_params = [*params, str(pk), *(v for statement in statements for v in statement.params)]
    locked, ((written,),) = send_all(connection, [(_marking_lock(model), [pk]), (writes, writes_params)])
    locked = [row[:-1] for row in locked]  # without the setting's value
    return instances(model, locked, using), bool(written)


@cache
def _marking_lock(model):
    """Lock one row, and note its key in HELD once it is locked (the subquery's lock comes before the outer
    projection: PostgreSQL does not fold a subquery that locks into its outer query)."""
    key = quote(model._meta.pk.column)
    locking = _select_all(model, 1, True, True)
    return f"SELECT held.*, set_config('{HELD}', held.{key}::text, true) FROM ({locking}) AS held"


def _by_statement(statements, found_rows):
    """The rows of _in_one's statement, as run_all returns them."""
    found = [[] for _ in statements]
    for n, row in found_rows:
        if row is not None:
            found[n].append(orjson.loads(row))
    return found


def placeholders(values):
    """ "%s, %s, …": one placeholder for each of these values (an IN list, a row's columns)."""
    return ", ".join(["%s"] * len(values))


def write_then_fetch(statement, model, sql, params=(), using=DEFAULT):
    """Run a write (a Statement that returns no rows), then a statement that returns rows of the model (as
    fetch_sql): on PostgreSQL both in one round trip (send_all)."""
    connection = connection_of(using)
    if connection.vendor == "postgresql":
        _, found = send_all(connection, [(statement.sql, statement.params), (sql, params)])
    else:
        with cursor_of(connection) as cursor:
            cursor.execute(statement.sql, statement.params)
            cursor.execute(sql, params)
            found = cursor.fetchall()
    return [_instance(model, row, connection, using) for row in found]


def fetch_sql(model, sql, params=(), using=DEFAULT):
    """Instances of the model from a statement that returns its columns in field order (e.g. UPDATE … RETURNING)."""
    connection = connection_of(using)
    with cursor_of(connection, single=True) as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    return [_instance(model, row, connection, using) for row in found]


def fetch_with(model, joined, parts, using=DEFAULT):
    """Rows of `model` chosen by several conditions, read by one statement: one round trip and one snapshot, so
    the parts agree with each other as a transaction's reads would, without BEGIN and COMMIT. The rows of the
    first part come each with its row of `joined` (a model whose primary key is model's, one to one).

    parts: [(condition on "m", model's row, as SQL with %s placeholders, its parameters)]. Returns one list per
    part, ordered by model's primary key: of (instance, joined instance or None) for the first, of instances
    for the others.
    """
    connection = connection_of(using)
    sql = _with(model, joined, tuple(where for where, _ in parts))
    width = len(model._meta.concrete_fields)
    found = [[] for _ in parts]
    with cursor_of(connection, single=True) as cursor:
        cursor.execute(sql, [value for _, params in parts for value in params])
        for part, *row in cursor.fetchall():
            instance = _instance(model, row[:width], connection, using)
            if part == 0:
                other = row[width:]
                instance = (instance, None if other[0] is None else _instance(joined, other, connection, using))
            found[part].append(instance)
    return found


@cache
def _with(model, joined, conditions):
    """fetch_with's statement: for each condition, the part's number, m's row, then j's (NULLs but in the first)."""
    table, key = quote(model._meta.db_table), quote(model._meta.pk.column)
    own = ", ".join(f"m.{quote(f.column)}" for f in model._meta.concrete_fields)
    other = ", ".join(f"j.{quote(f.column)}" for f in joined._meta.concrete_fields)
    nulls = ", ".join("NULL" for _ in joined._meta.concrete_fields)
    first = (
        f"SELECT 0, {own}, {other} FROM {table} m LEFT JOIN {quote(joined._meta.db_table)} j"
        f" ON j.{quote(joined._meta.pk.column)} = m.{key} WHERE {conditions[0]}"
    )
    rest = [f"SELECT {n}, {own}, {nulls} FROM {table} m WHERE {where}" for n, where in enumerate(conditions) if n]
    position = 2 + model._meta.concrete_fields.index(model._meta.pk)  # of the key's column: the database's collation
    return f"{' UNION ALL '.join([first, *rest])} ORDER BY 1, {position}"


@cache
def columns(model):
    """The model's column list, in field order, for hand-written statements that return its rows."""
    return ", ".join(quote(f.column) for f in model._meta.concrete_fields)


def execute(sql, params=(), using=DEFAULT, several=False):
    """Run one hand-written statement that returns no rows (`several`: statements, in one string)."""
    with cursor_of(connection_of(using), single=not several) as cursor:
        cursor.execute(sql, params)


def query(sql, params=(), using=DEFAULT):
    """Run one hand-written statement that returns rows (a SELECT, or a write … RETURNING); its rows."""
    with cursor_of(connection_of(using), single=True) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
