-- The SQL a promise.get runs: one read by primary key in a transaction.
\set n random(1, :prefill)
BEGIN;
SELECT id, state, param, value, tags, timeout_at, created_at, settled_at FROM promises_promise WHERE id = 'g-' || :n;
COMMIT;
