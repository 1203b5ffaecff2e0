"""Django's SQLite backend, with the writers of one process queued in Python rather than in SQLite.

SQLite takes one writer at a time, and every transaction here begins IMMEDIATE, as a writer
(resonate_site/settings.py). A writer that finds the lock taken waits in SQLite's busy handler, which sleeps and
looks again (1, 2, 5, 10, … 100 ms): under 16 clients that polling was the embedded mode's p99 (bench/HISTORY.md).
So the transactions of one process take turns on a lock of the process first, and SQLite's own lock is then
free whenever one asks for it. The lock is held from BEGIN to COMMIT or ROLLBACK, not while the commit's hooks
run (delivery notices). Another process (a management command) still meets the busy handler, as before.

Each connection also has resonate_function(param), the function a promise runs (floor/lineage.py).
"""

import threading
from contextlib import contextmanager

from django.db import OperationalError
from django.db.backends.sqlite3 import base

from floor.lineage import FUNCTION_SQL, function_of_json

WRITER_WAIT_S = 30.0  # as long as SQLite's own busy timeout (resonate_site/settings.py)
_writer = threading.Lock()
# None: each connection checkpoints by SQLite's default. Set by floor/sqlite3/checkpoints.py when a thread of this
# process checkpoints: connections opened from then on checkpoint by themselves only past this many log frames.
autocheckpoint_frames = None


@contextmanager
def writing():
    """Hold this process's writer lock, as a transaction does from BEGIN to its end."""
    if not _writer.acquire(timeout=WRITER_WAIT_S):
        raise OperationalError(f"database is locked: no turn to write within {WRITER_WAIT_S:g} s")
    try:
        yield
    finally:
        _writer.release()


class DatabaseWrapper(base.DatabaseWrapper):
    holds_writer = False

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        # The SQL function that PostgreSQL has from promises/migrations/0006 (floor/lineage.py)
        connection.create_function(FUNCTION_SQL, 1, function_of_json, deterministic=True)
        if autocheckpoint_frames is not None:
            connection.execute(f"PRAGMA wal_autocheckpoint={int(autocheckpoint_frames)}")
        return connection

    def _start_transaction_under_autocommit(self):
        if not _writer.acquire(timeout=WRITER_WAIT_S):
            # What SQLite's busy timeout raises, and is handled as: a lost race, retried, then a 503.
            raise OperationalError(f"database is locked: no turn to write within {WRITER_WAIT_S:g} s")
        self.holds_writer = True
        try:
            self._begin()
        except BaseException:
            self._release_writer()
            raise

    def _begin(self):
        if self.queries_logged or self.execute_wrappers:  # watched: through Django's cursor, which shows it
            super()._start_transaction_under_autocommit()
        else:  # what Django's does, without a cursor of Django's (floor.rows._bare_sqlite: its cost)
            with self.wrap_database_errors:
                self.connection.execute(f"BEGIN {self.transaction_mode}" if self.transaction_mode else "BEGIN")

    def _commit(self):
        try:
            return super()._commit()
        finally:
            if not (self.connection is not None and self.connection.in_transaction):
                self._release_writer()  # a commit that failed (SQLITE_BUSY) leaves the transaction open: kept

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._release_writer()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._release_writer()

    def _release_writer(self):
        if self.holds_writer:
            self.holds_writer = False
            _writer.release()
