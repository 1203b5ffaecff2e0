-- What a promise.settle of a promise with nothing registered on it sends (promises.handlers.promise_settle,
-- promises.engine.settle_all): the promise locked and read, and what is registered (any listener, its awaiters)
-- on it (promises.models.registered_on), in one query string with BEGIN (floor.rows.lock_then_query,
-- floor.rows._Opening); then the settlement written, its task fulfilled and the scrub, sent with COMMIT in one
-- query string (floor.rows.at_commit). A pipeline reproduces each query string's single round trip. pgbench
-- prepares every statement (-M prepared); the server binds the statements it sends with COMMIT client-side.
\set n random(1, :prefill)
\startpipeline
BEGIN;
SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" IN ('pg-' || :n) ORDER BY "id" DESC FOR UPDATE;
SELECT NULL WHERE EXISTS (SELECT 1 FROM "promises_listener" WHERE "promise_id" = 'pg-' || :n) UNION ALL SELECT "awaiter_id" FROM "promises_callback" WHERE "awaited_id" = 'pg-' || :n;
\endpipeline
\startpipeline
UPDATE "promises_promise" SET "state" = v.column2, "value" = v.column3, "settled_at" = v.column4, "timeout_armed" = v.column5 FROM (VALUES (CAST('pg-' || :n AS text), CAST('resolved' AS varchar(17)), CAST('{"data": "NDI="}'::jsonb AS jsonb), CAST(1764590000000 AS bigint), CAST(false AS boolean))) v WHERE "promises_promise"."id" = v.column1;
UPDATE "tasks_task" SET "state" = 'fulfilled', "pid" = NULL, "ttl" = NULL, "resumes" = '[]'::jsonb, "timeout_kind" = NULL, "timeout_at" = NULL WHERE "id" = 'pg-' || :n;
DELETE FROM "promises_callback" WHERE "awaiter_id" IN ('pg-' || :n) AND "awaited_id" NOT IN ('pg-' || :n);
COMMIT;
\endpipeline
