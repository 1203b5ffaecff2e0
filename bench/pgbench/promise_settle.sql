-- The SQL a promise.settle runs: lock, read registrations, write the settlement, fulfil, scrub.
\set n random(1, :prefill)
BEGIN;
SELECT id, state, timeout_at, tags FROM promises_promise WHERE id = 'pg-' || :n FOR UPDATE;
SELECT address FROM promises_listener WHERE promise_id = 'pg-' || :n;
SELECT awaiter_id FROM promises_callback WHERE awaited_id = 'pg-' || :n;
UPDATE promises_promise SET state = 'resolved', value = '{"data": "NDI="}', settled_at = 2, timeout_armed = false WHERE id = 'pg-' || :n;
UPDATE tasks_task SET state = 'fulfilled', pid = NULL, ttl = NULL, resumes = '[]', timeout_kind = NULL, timeout_at = NULL WHERE id = 'pg-' || :n;
DELETE FROM promises_callback WHERE awaiter_id = 'pg-' || :n;
COMMIT;
