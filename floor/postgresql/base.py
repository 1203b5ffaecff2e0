"""Django's PostgreSQL backend, telling floor.rows when a transaction or a savepoint has rolled back.

psycopg deallocates every prepared statement of the session when it rolls back having prepared statements of
its own; the statements floor.rows.send_all prepared by name go with them (floor.rows.rolled_back).
"""

from django.db.backends.postgresql import base

from floor import rows


class DatabaseWrapper(base.DatabaseWrapper):
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
