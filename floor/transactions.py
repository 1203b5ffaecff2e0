"""Running one protocol operation in one transaction, retried when it loses a race or a kept connection."""

import contextlib
import contextvars
import enum
import logging
import random
import time

from django.db import (
    DEFAULT_DB_ALIAS,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    connection,
    transaction,
)

from floor import rows
from floor.conf import resonate_settings
from floor.counters import requests_committed_together
from floor.outages import Outage, log_failure, lost_connection

log = logging.getLogger(__name__)

# PostgreSQL: serialization_failure, deadlock_detected, lock_not_available.
RETRYABLE_SQLSTATES = {"40001", "40P01", "55P03"}
# PostgreSQL's class 53, insufficient resources: out of memory or of shared memory (the lock table full), disk full,
# too many connections. Nothing was written; it passes (other work ends), so it is retried and then a 503, not a 500.
INSUFFICIENT_RESOURCES = "53"


class Busy(Outage):
    """The operation kept losing races; the caller may retry it."""

    answer = "Server busy, please retry"


class Unavailable(Busy):
    """The database could not be reached, or the connection was lost while committing; the caller may retry."""

    answer = "Database unavailable, please retry"


def lost_race(error):
    """Whether a database error means "another transaction got there first", or that the database is short of a
    resource for a moment, rather than a bug. Either way the operation runs again, and its caller gets a 503 if it
    keeps failing."""
    if isinstance(error, IntegrityError):
        return True  # two creates of one id: the loser retries and finds the winner's row
    if getattr(error, "function_remade", False):
        return True  # a function of floor.functions gone or stale: made again, or its statements sent as a string
    state = getattr(error.__cause__, "sqlstate", None) or ""
    if state in RETRYABLE_SQLSTATES or state.startswith(INSUFFICIENT_RESOURCES):
        return True
    return "database is locked" in str(error) or "database table is locked" in str(error)


class Mode(enum.Enum):
    """How an operation meets PostgreSQL (SQLite runs every one in a plain transaction)."""

    TRANSACTION = "transaction"
    AUTOCOMMIT = "autocommit"  # no BEGIN/COMMIT: it only reads, or writes with one statement


OUTAGE_POLL_S = 0.2  # how often a request waiting for the database tries to connect
TROUBLE_S = 10.0  # how long after a lost connection the database counts as troubled (database_troubled)
_troubled_until = 0.0  # time.monotonic() until which it does


def database_troubled():
    """Whether this process lost a database connection within the last TROUBLE_S: requests may then wait for the
    database for seconds (DB_OUTAGE_WAIT_MS), and the server keeps them off its event loop's thread
    (resonate_site.serving.ProtocolThreads)."""
    return time.monotonic() < _troubled_until


def _lost_a_connection():
    global _troubled_until
    _troubled_until = time.monotonic() + TROUBLE_S


def close_if_old():
    """What Django's close_old_connections() does before each request, for the one database the protocol uses: its
    connection on this thread is closed when it has outlived CONN_MAX_AGE, was left out of autocommit, or had an
    error since its last commit and no longer answers (Django's own close_if_unusable_or_obsolete decides and
    closes). A kept connection in good order, the usual case, costs one look-up of it and three reads, where
    Django's walk over every alias, through asgiref's locals and ensure_connection, was about 3% of a promise.get's
    CPU at 16 clients (bench/HISTORY.md, 2026-12-06)."""
    kept = rows.connection_of(DEFAULT_DB_ALIAS)
    if kept.connection is None:
        return
    if (
        kept.errors_occurred
        or kept.autocommit != kept.settings_dict["AUTOCOMMIT"]
        or (kept.close_at is not None and time.monotonic() >= kept.close_at)
    ):
        kept.close_if_unusable_or_obsolete()
    else:
        kept.health_check_done = False  # as Django's does: a request checks its connection's health once


def run_atomically(operation, *args, mode=Mode.TRANSACTION, ambiguous_none=False):
    """operation(*args) inside transaction.atomic(), re-run from scratch on a lost race (bounded).

    A kept connection that turns out to be dead is replaced and the operation runs again: nothing of it can have
    been committed. A create whose rows went in another thread's statement, whose connection was lost
    (rows.LostElsewhere), runs again on its own connection, as after a lost connection of its own (its rows may
    have committed), without closing that connection or taking the database for troubled. A database that cannot
    be reached is waited for, DB_OUTAGE_WAIT_MS at most (a failover's promotion takes a second or two, and the
    released Python SDK does not retry a 503), then Unavailable. A connection lost while committing leaves the
    outcome unknown: Unavailable at once. Either way the caller is told to retry.

    ambiguous_none: the operation writes with one statement in autocommit, and answers None when it finds
    that write already made (task.create's and task.acquire's first steps). Its statement may have committed
    before the connection was lost; run again, its None cannot tell that write from another request's, so it
    is Unavailable, as a connection lost while committing is. Run again, any other answer is its own. (A
    statement that never reached the database and whose re-run answers None gets the same Unavailable: the
    two cannot be told apart.)

    In Mode.AUTOCOMMIT the operation runs without a transaction on PostgreSQL: it only reads (under READ
    COMMITTED each statement sees its own snapshot anyway) or writes with one statement, atomic by itself.
    BEGIN and COMMIT would be two round trips of three.
    """
    attempts, reconnected, waiting_until = resonate_settings.DB_RETRIES, False, None
    kept = rows.connection_of(DEFAULT_DB_ALIAS)  # `connection`, looked up once: each use of the proxy looks it up again
    postgresql = kept.vendor == "postgresql"
    group = _group.get()
    attempt = 0
    while attempt < attempts:
        attempt += 1
        committing = False
        _rerun.set(reconnected)
        try:
            if group is not None:  # one of several in a transaction that run_together commits
                return group.in_savepoint(operation, args)
            if mode is Mode.AUTOCOMMIT and postgresql:
                result = _collecting(operation, args, kept=kept)
                if result is None and ambiguous_none and reconnected:
                    raise Unavailable(f"{operation.__name__}: connection lost while its write may have committed")
                return result
            outermost = not kept.in_atomic_block  # a savepoint's writes are not the commit's to send
            with transaction.atomic(), rows.holding_for_commit() if outermost else contextlib.nullcontext():
                result = _collecting(operation, args, kept=kept)
                committing = True
                rows.commit_held()  # the writes held for the commit, with it (rows.at_commit)
            return result
        except (IntegrityError, OperationalError, InterfaceError, ProgrammingError) as error:  # Programming: 42883
            if isinstance(error, rows.LostElsewhere) and not reconnected:  # its own connection is not in question
                log.info("running %s again: %s", operation.__name__, error)
                reconnected = True  # what it wrote may have committed, as after a lost connection
                continue
            if lost_connection(error):
                _lost_a_connection()
                connection.close()
                if committing:
                    raise Unavailable(f"{operation.__name__}: connection lost while committing: {error}") from error
                if reconnected:  # no connection now: wait for the database, as long as DB_OUTAGE_WAIT_MS from here
                    now = time.monotonic()
                    if waiting_until is None:
                        waiting_until = now + resonate_settings.DB_OUTAGE_WAIT_MS / 1000
                    if now >= waiting_until:
                        raise Unavailable(f"{operation.__name__}: {error}") from error
                    time.sleep(min(OUTAGE_POLL_S, waiting_until - now))
                    attempt -= 1  # waiting out an outage is not losing a race
                    continue
                log.info("reconnecting after %s", error)
                reconnected = True
                continue
            if not lost_race(error):
                raise
            log.info("retrying %s after a lost race (attempt %d): %s", operation.__name__, attempt, error)
            time.sleep(random.uniform(0, 0.002 * attempt))
    raise Busy(f"{operation.__name__} lost {attempts} races in a row")


_rerun = contextvars.ContextVar("resonate_rerun", default=False)


class Broken(Exception):
    """A group's transaction can no longer be trusted (see Group); each of its calls runs again on its own."""


class Group:
    """The transaction run_together opens, shared by the operations of several calls, each in a savepoint of it.

    The savepoints are SQLite's own, sent on the raw connection (two statements of C, where a nested
    transaction.atomic() costs Django's cursor and bookkeeping). Django does not know them, so what it would do
    at a savepoint's rollback is done here: its flag for a rollback is cleared, and what an operation asks to be
    told after the commit is kept only once it has returned, then registered once for the whole group
    (register_hooks: one delivery notice for every message the group wrote). Anything the savepoints cannot undo
    cleanly (a failed ROLLBACK TO, Django's flag left set by an operation that returned) makes the group Broken."""

    SAVEPOINT = "resonate_call"

    def __init__(self, raw):
        self.raw, self.broken = raw, False
        self.collected = {}  # what the operations ask to be told after the commit, each hook once for all of them

    def in_savepoint(self, operation, args):
        """_collecting(operation, args) in a savepoint: undone if it raises."""
        self._send("SAVEPOINT")
        try:
            result = _collecting(operation, args, into=self.collected)  # added only once it has returned
        except BaseException:
            self._send("ROLLBACK TO")
            self._send("RELEASE")
            connection.needs_rollback = False  # what Django's own savepoint does once rolled back to
            raise
        if connection.needs_rollback:
            self.broken = True
            raise Broken(f"{operation.__name__} left its transaction marked for rollback")
        self._send("RELEASE")
        return result

    def register_hooks(self):
        for hook, items in self.collected.items():
            transaction.on_commit(_safely(hook, items))

    def _send(self, verb):
        try:
            self.raw.execute(f"{verb} {self.SAVEPOINT}")
        except Exception:
            self.broken = True  # SQLite ended the transaction itself (disk full, an I/O error): run_together redoes
            raise


_group = contextvars.ContextVar("resonate_group", default=None)


def run_together(calls):
    """[call() for call in calls], the operations they run through run_atomically sharing one transaction: one
    BEGIN and one COMMIT for all of them (group commit), each operation in a savepoint, its lost races retried
    there. The results are returned once that transaction has committed, and the after_commit hooks run then.

    For SQLite, which takes one writer at a time anyway, and where a transaction's BEGIN, COMMIT and Django's
    bookkeeping around them were a fifth of a create's time (resonate_site.serving.ProtocolThreads; bench/HISTORY.md,
    "group commit"). Should the shared transaction fail to begin or to commit, or break, every call runs again on
    its own, each in its own transaction, as if it had come alone: a caller is only ever answered with what was
    committed. (What a call counts or logs on its way, the request counters, it then counts twice.)"""
    if len(calls) == 1:
        return [calls[0]()]
    try:
        with transaction.atomic():
            group = Group(connection.connection)
            token = _group.set(group)
            try:
                results = []
                for call in calls:
                    results.append(call())
                    if group.broken:
                        raise Broken("a savepoint could not be rolled back")
                group.register_hooks()
            finally:
                _group.reset(token)
        requests_committed_together(len(calls))
        return results
    except Exception as error:
        log.warning("%d calls that were to commit together run one by one: %s", len(calls), error)
        return [call() for call in calls]


def run_again_on_a_new_connection():
    """Whether the operation under way runs again because its connection was lost, or that of another thread's
    statement that carried its rows (rows.LostElsewhere): a statement of its first run may have committed (see
    run_atomically), and what it finds written may be its own."""
    return _rerun.get()


# What the operation under way asked to be told after its commit: {hook: [items]} (see after_commit).
_collected = contextvars.ContextVar("resonate_after_commit", default=None)


def after_commit(hook, *items):
    """Call hook([item, …]) once the current transaction commits; never if it rolls back.

    Within run_atomically the items of one operation are gathered, so each hook runs once per commit
    with all of them (one delivery notice for every message a transaction wrote). A hook that raises is
    logged: the transaction has committed, and its caller must hear so.
    """
    collected = _collected.get()
    if collected is None:
        transaction.on_commit(_safely(hook, list(items)))
    else:
        collected.setdefault(hook, []).extend(items)


def _collecting(operation, args, into=None, kept=None):
    """operation(*args), with what it asks to be told after the commit registered once it has returned: each hook
    once with all its items; or, `into` a dict, added there for the caller to register (Group). `kept`: the
    database's connection, when the caller has looked it up."""
    collected = {}
    token = _collected.set(collected)
    try:
        result = operation(*args)
    finally:
        _collected.reset(token)
    if into is None:
        if collected:
            kept = rows.connection_of(DEFAULT_DB_ALIAS) if kept is None else kept
            # As Django's on_commit: at once outside a transaction in autocommit (Mode.AUTOCOMMIT, one statement that
            # has committed), without its look-ups and connection check; at the commit inside one.
            at_once = rows.in_autocommit(kept)  # not opened yet too: its statement went on another's connection
            for hook, items in collected.items():
                if at_once:
                    _safely(hook, items)()
                else:
                    kept.on_commit(_safely(hook, items))
    else:
        for hook, items in collected.items():
            into.setdefault(hook, []).extend(items)
    return result


def _safely(hook, items):
    def call_hook():
        try:
            hook(items)
        except Exception:
            log_failure(log, "after a commit, %s failed", getattr(hook, "__name__", hook))

    return call_hook
