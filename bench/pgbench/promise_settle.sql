-- What a promise.settle sends (promises.handlers.promise_settle, promises.engine.settle_all): the promise
-- locked and read, then the settlement as one statement (floor.rows.run_all: the settlement written, its
-- task fulfilled, the scrub, its listeners and callbacks taken), in a transaction. The lock carries BEGIN in
-- one round trip (floor.rows._Opening), which a pipeline reproduces; statements prepared, as the server
-- prepares the settlement (floor.rows.cursor_of).
\set n random(1, :prefill)
\startpipeline
BEGIN;
SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" = 'pg-' || :n FOR UPDATE;
\endpipeline
WITH s0 AS (UPDATE "promises_promise" SET "state" = v.column2, "value" = v.column3, "settled_at" = v.column4, "timeout_armed" = v.column5 FROM (VALUES (CAST('pg-' || :n AS text), CAST('resolved' AS varchar(17)), CAST('{"data": "NDI="}'::jsonb AS jsonb), CAST(1764590000000 AS bigint), CAST(false AS boolean))) v WHERE "promises_promise"."id" = v.column1),
  s1 AS (UPDATE "tasks_task" SET "state" = 'fulfilled', "pid" = NULL, "ttl" = NULL, "resumes" = '[]', "timeout_kind" = NULL, "timeout_at" = NULL WHERE "id" IN ('pg-' || :n)),
  s2 AS (DELETE FROM "promises_callback" WHERE "awaiter_id" IN ('pg-' || :n) AND "awaited_id" NOT IN ('pg-' || :n)),
  s3 AS (DELETE FROM "promises_listener" WHERE "promise_id" IN ('pg-' || :n) RETURNING "promise_id", "address"),
  s4 AS (DELETE FROM "promises_callback" WHERE "awaited_id" IN ('pg-' || :n) RETURNING "id", "awaited_id", "awaiter_id")
SELECT 3, row_to_json(s3)::text FROM s3 UNION ALL SELECT 4, row_to_json(s4)::text FROM s4;
COMMIT;
