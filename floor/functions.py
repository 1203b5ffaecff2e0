"""Statements sent together, run as one PL/pgSQL function made from their own text (PostgreSQL).

floor.rows.send_all sends several statements in one round trip. As one client-bound query string, PostgreSQL would
parse and plan each of them at every call, and the client would quote every parameter into the string. Instead,
once a process has sent the same statements more than SENT_BEFORE times, they become a function:

    CREATE FUNCTION r_<digest>(<the parameters' types>) RETURNS TABLE (r_part integer, <result columns>)
    LANGUAGE plpgsql AS $r$ BEGIN <each statement, as written>; … END $r$

called as one statement, `SELECT * FROM r_<digest>(%s, …)`, which psycopg binds server-side (and prepares once the
connection has sent it DATABASE_PREPARE_THRESHOLD times). PL/pgSQL plans each statement of its body once per
session, whatever the call's binding, so the plans are kept behind a pooler too. Nothing is written by hand: a
statement without rows runs as it is, and one with rows (a SELECT, a write … RETURNING) runs as a FOR loop that
returns each row in columns of its types, tagged with its place (r_part). The function is VOLATILE, so under READ
COMMITTED each statement takes a new snapshot, as each statement of a query string does: locks, and what a
statement sees of those before it, are the same either way.

The parameter and column types are PostgreSQL's own: each statement is described (libpq's PQdescribePrepared) on a
connection of its own, which also creates the function, in a transaction of its own (so a request's rollback never
takes a function with it). The function's name is a digest of its whole definition, types included: two releases
that send different statements, or one schema and the next, never call each other's functions during a rolling
restart. Whatever cannot become a function (more than FUNCTION_MAX_ARGS parameters, a statement PostgreSQL cannot
describe alone, a user without CREATE on the schema) is sent as one client-bound string, as before, and logged once.
"""

import hashlib
import logging
import operator
import re
import threading
import time

log = logging.getLogger(__name__)

SENT_BEFORE = 1  # a process makes a function of statements it sends together more than this many times
FUNCTION_MAX_ARGS = 100  # PostgreSQL's FUNC_MAX_ARGS
UNDEFINED_FUNCTION = "42883"  # the function is gone (dropped by hand), or takes other types than this call sends
SHAPES_MAX = 4096  # statement strings counted per process; beyond, the counts start again (IN lists of every length)

_BOOL, _INT2, _INT4, _INT8, _JSONB = 16, 21, 23, 20, 3802  # type OIDs
_COMMAND_OK = 1  # psycopg.pq.ExecStatus.COMMAND_OK


class Function:
    """A function made of statements sent together: its call, and how its rows split into each statement's."""

    __slots__ = ("name", "call", "readers", "returns", "failures")

    def __init__(self, name, arguments, places):
        self.name, self.failures = name, 0
        # each statement's reader: its columns, picked out of a row by their places; None for one without rows
        self.readers = [None if at is None else _picker(at) for at in places]
        self.returns = any(reader is not None for reader in self.readers)
        self.call = f"SELECT {'* FROM ' if self.returns else ''}{name}({', '.join(['%s'] * arguments)})"

    def results(self, found):
        """The rows of each statement, as a query string's results would be: None for one that returns none."""
        by_part = [None if reader is None else [] for reader in self.readers]
        if self.returns:  # else its one row is its void
            for row in found:
                by_part[row[0]].append(self.readers[row[0]](row))
        return by_part


def _picker(places):
    if places == list(range(places[0], places[0] + len(places))):
        start, stop = places[0], places[0] + len(places)
        return lambda row: row[start:stop]
    get = operator.itemgetter(*places)
    return get if len(places) > 1 else lambda row: (get(row),)


_shapes = {}  # (alias, database, statements): how often sent (int), its Function, or NEVER
_by_name = {}  # name: its Function (one object per function, which counts its failures)
_creating = threading.Lock()
_paused_until = 0.0  # time.monotonic() before which no function is made (the side connection failed)
NEVER = "never"
PAUSE_S = 30  # after a failure to connect, or to wait for a lock, no function is made for this long
# The side connection waits this long at most for a lock: a request holding locks waits for it (a migration queued
# between the two would otherwise stall both, PostgreSQL seeing no cycle through this process).
SIDE_OPTIONS = "-c lock_timeout=200 -c statement_timeout=2000"
# A call that failed so: the function is gone (dropped by hand), or no longer matches the schema (a column's type
# changed under a running release) or the types this call's values are bound with. PostgreSQL's undefined_function,
# datatype_mismatch, feature_not_supported.
REMADE_SQLSTATES = {UNDEFINED_FUNCTION, "42804", "0A000"}


def function_for(connection, parts):
    """The Function that runs these statements, (sql, params) each, or None: send them as they are."""
    key = (connection.alias, connection.settings_dict["NAME"], tuple([sql for sql, _ in parts]))
    found = _shapes.get(key, 0)
    if found.__class__ is Function:
        return found
    if found is NEVER:
        return None
    if found < SENT_BEFORE:
        if len(_shapes) >= SHAPES_MAX:
            _shapes.clear()
        _shapes[key] = found + 1
        return None
    if sum(len(params) for _, params in parts) > FUNCTION_MAX_ARGS:
        _shapes[key] = NEVER
        return None
    if time.monotonic() < _paused_until:
        return None
    with _creating:
        found = _shapes.get(key, 0)
        if found.__class__ is not Function and found is not NEVER:
            found = _shapes[key] = _create(connection, parts)
    return found if found.__class__ is Function else None


def failed(function, error):
    """A call of `function` failed with this (psycopg) error: whether the function is to blame (REMADE_SQLSTATES),
    and the operation may run again (floor.transactions). Its statements are then described and made into a function
    again at their next send; a second time, the process sends them as a string from then on."""
    if getattr(error, "sqlstate", None) not in REMADE_SQLSTATES:
        return False
    function.failures += 1
    for key, found in list(_shapes.items()):
        if found is function:
            _shapes[key] = NEVER if function.failures > 1 else SENT_BEFORE
    return True


def _create(connection, parts):
    """Describe the statements and create their function (unless it exists) on a connection of its own: the Function;
    NEVER (logged) when they cannot become one; SENT_BEFORE (asked again later) when the connection failed or waited
    too long for a lock."""
    global _paused_until
    import psycopg

    try:
        params = connection.get_connection_params()
        options = f"{params.get('options', '')} {SIDE_OPTIONS}".strip()
        side = psycopg.connect(**{**params, "options": options, "autocommit": True})
    except Exception as error:
        log.warning("could not connect to make a function of statements sent together (%s); sent as they are", error)
        _paused_until = time.monotonic() + PAUSE_S
        return SENT_BEFORE
    try:
        described = [_describe(side.pgconn, sql, params) for sql, params in parts]
        definition, name, arguments, places = _definition([sql for sql, _ in parts], described, side)
        if not _exists(side, name):
            _create_function(side, definition)
        return _by_name.setdefault(name, Function(name, arguments, places))
    except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled, psycopg.OperationalError) as error:
        log.warning("making a function of statements sent together waited or failed (%s); sent as they are", error)
        _paused_until = time.monotonic() + PAUSE_S
        return SENT_BEFORE
    except psycopg.errors.InsufficientPrivilege as error:
        log.warning("no function is made of statements sent together (%s): grant CREATE on the schema", error)
        _paused_until = float("inf")  # for this process's life
        return NEVER
    except Exception as error:
        log.warning("statements sent together stay a query string (%s): %s", error, [sql for sql, _ in parts])
        return NEVER
    finally:
        side.close()


def _describe(pgconn, sql, params):
    """(parameter type OIDs, [(column type OID, type modifier)]) of one statement, as PostgreSQL plans it. Parameters
    are described with the types psycopg binds them with where PostgreSQL cannot always tell from the statement (an
    int in `%s - %s`), and left for PostgreSQL to infer otherwise. A parameter it infers as a smaller integer is then
    declared bigint, as psycopg binds an int of any size, and the statement described again with it so: what it
    returns is then of the types the function's body gives it."""
    text, _ = numbered(sql, 0)
    hints = [_hint(value) for value in params]
    parameters, columns = _described(pgconn, text, hints)
    widened = [_INT8 if oid in (_INT2, _INT4) else oid for oid in parameters]
    if widened != parameters:
        parameters, columns = _described(pgconn, text, widened)
    return parameters, columns


def _described(pgconn, numbered, types):
    prepared = pgconn.prepare(b"", numbered.encode(), types)
    if prepared.status != _COMMAND_OK:
        raise _error(prepared)
    found = pgconn.describe_prepared(b"")
    if found.status != _COMMAND_OK:
        raise _error(found)
    columns = [(found.ftype(n), found.fmod(n)) for n in range(found.nfields)] if found.nfields else None
    return [found.param_type(n) for n in range(found.nparams)], columns


def _error(result):
    """A failed describe as psycopg's error of its SQLSTATE (a lock not available, a privilege missing: _create)."""
    from psycopg import errors

    state = (result.error_field(_SQLSTATE) or b"").decode()
    message = result.error_message.decode(errors="replace").strip()
    return errors.lookup(state)(message) if state else ValueError(message)


_SQLSTATE = ord("C")  # PG_DIAG_SQLSTATE


def _hint(value):
    from psycopg.types.json import Jsonb

    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT8
    return _JSONB if isinstance(value, Jsonb) else 0


def numbered(sql, offset):
    """The statement with $n for its %s placeholders, counted from offset + 1, and % for %%: (text, count)."""
    count = 0

    def number(match):
        nonlocal count
        if match.group(0) == "%%":
            return "%"
        count += 1
        return f"${offset + count}"

    return re.sub(r"%%|%s", number, sql), count


def _definition(sqls, described, side):
    """(CREATE FUNCTION …, its name, its count of arguments, each statement's column places in a row, or None).

    The statements that return rows share the function's columns: a column of one type serves the same type in
    each (the first text column of every statement is the same output column), so that a row is as wide as the
    widest statement's, not as all of them together; r_part says whose row it is. A function of statements that
    return no rows returns void."""
    oids = [(oid, -1) for parameters, _ in described for oid in parameters]  # widened by _describe
    oids += [column for _, columns in described for column in columns or ()]
    names = _type_names(side, oids)
    arguments = [names.pop(0) for _ in range(sum(len(parameters) for parameters, _ in described))]
    outputs, body, places, offset, rows = ["r_part integer"], [], [], 0, []
    for part, (sql, (parameters, columns)) in enumerate(zip(sqls, described, strict=True)):
        numbered_sql, count = numbered(sql, offset)
        assert count == len(parameters), (sql, parameters)
        offset += count
        body.append(f"{numbered_sql};")
        if columns is None:
            places.append(None)
            continue
        taken, at = set(), []
        for _ in columns:
            kind = names.pop(0)
            free = [n for n, output in enumerate(outputs) if n and n not in taken and output.split(" ", 1)[1] == kind]
            if not free:
                outputs.append(f"r_{len(outputs)} {kind}")
                free = [len(outputs) - 1]
            taken.add(free[0])
            at.append(free[0])
        places.append(at)
        rows.append((part, numbered_sql, at))
    for part, numbered_sql, at in rows:
        if numbered_sql.startswith("SELECT "):  # a query of its own: its rows go straight to the result
            aliases = [f"c{n}" for n in range(len(at))]
            picked = [
                aliases[at.index(n)] if n in at else f"NULL::{output.split(' ', 1)[1]}"
                for n, output in enumerate(outputs)
                if n
            ]
            body[part] = (
                f"RETURN QUERY SELECT {part}, {', '.join(picked)} FROM ({numbered_sql}) AS r_s({', '.join(aliases)});"
            )
        else:  # a write … RETURNING, or a WITH of writes, which cannot be a subquery: row by row
            variables = ", ".join(outputs[n].split(" ", 1)[0] for n in at)
            body[part] = f"r_part := {part}; FOR {variables} IN {numbered_sql} LOOP RETURN NEXT; END LOOP;"
    returns = f"TABLE ({', '.join(outputs)})" if len(outputs) > 1 else "void"
    text = (
        f"({', '.join(arguments)}) RETURNS {returns} LANGUAGE plpgsql AS $r$\n"
        "#variable_conflict use_column\nBEGIN\n" + "\n".join(body) + "\nEND $r$"
    )
    name = "r_" + hashlib.blake2b(text.encode(), digest_size=10).hexdigest()
    return f"CREATE FUNCTION {name}{text}", name, len(arguments), places


def _type_names(side, oids):
    """Each (type OID, modifier) as PostgreSQL spells it in a declaration."""
    if not oids:
        return []
    with side.cursor() as cursor:
        cursor.execute(
            "SELECT format_type(o, NULLIF(m, -1)) FROM unnest(%s::oid[], %s::int[]) WITH ORDINALITY AS t(o, m, n)"
            " ORDER BY n",
            [[oid for oid, _ in oids], [modifier for _, modifier in oids]],
        )
        return [name for (name,) in cursor.fetchall()]


def _exists(side, name):
    with side.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE p.proname = %s AND n.nspname = current_schema()",
            [name],
        )
        return cursor.fetchone() is not None


def _create_function(side, definition):
    """CREATE FUNCTION; another process that created the same one meanwhile is as good."""
    from psycopg import errors

    try:
        with side.cursor() as cursor:
            cursor.execute(definition)
    except (errors.DuplicateFunction, errors.UniqueViolation):
        pass
