-- What a promise.get sends (floor.rows.fetch): one read by primary key, in autocommit (reads run
-- without BEGIN/COMMIT on PostgreSQL).
\set n random(1, :prefill)
SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" = 'g-' || :n;
