-- What a promise.settle sends (promises.handlers.promise_settle, promises.engine.settle_all), as the server
-- sends it: a pipelined transaction (promises/transactions.py Mode.PIPELINED), four round trips. Run with
-- pgbench -M extended (pipelines need the extended protocol, which the server's pipeline uses too).
\set n random(1, :prefill)
\startpipeline
BEGIN;
SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" = 'pg-' || :n FOR UPDATE;
\endpipeline
\startpipeline
DELETE FROM "promises_listener" WHERE "promise_id" IN ('pg-' || :n) RETURNING "promise_id", "address";
DELETE FROM "promises_callback" WHERE "awaited_id" IN ('pg-' || :n) RETURNING "id", "awaited_id", "awaiter_id";
\endpipeline
\startpipeline
UPDATE "promises_promise" SET "state" = 'resolved', "value" = '{"data": "NDI="}'::jsonb, "settled_at" = 1764590000000, "timeout_armed" = false WHERE "id" = 'pg-' || :n;
UPDATE "tasks_task" SET "state" = 'fulfilled', "pid" = NULL, "ttl" = NULL, "resumes" = '[]', "timeout_kind" = NULL, "timeout_at" = NULL WHERE "id" IN ('pg-' || :n);
DELETE FROM "promises_callback" WHERE "awaiter_id" IN ('pg-' || :n);
COMMIT;
\endpipeline
