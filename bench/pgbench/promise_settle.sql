-- What a promise.settle of a promise with nothing registered on it sends (promises.handlers.promise_settle_at_once,
-- promises.engine.settle_at_once): two statements in one query string, one implicit transaction, each an EXECUTE
-- of a statement the connection prepared once (floor.rows.send_all); pgbench sends them as a pipeline of prepared
-- statements, one round trip, planned once. The promise locked and read, its key noted as held; then the settlement's
-- writes, made only if the lock found the promise and it is live with nothing registered on it
-- (floor.rows.lock_then_write, promises.models.live_and_unregistered). The ids are drawn from pending promises
-- bench/run.py prefills and sets pending again before each run (a draw that repeats within a run finds its promise
-- settled and writes nothing, as a server settle would).
\set n random(1, :settle_prefill)
\startpipeline
SELECT held.*, set_config('floor.held', held."id"::text, true) FROM (SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" IN ('pg-' || :n) ORDER BY "id" DESC FOR UPDATE) AS held;
WITH provided AS MATERIALIZED (SELECT 1 FROM "promises_promise" WHERE "id" = 'pg-' || :n AND "state" = 'pending' AND "timeout_at" > 1764590000000 AND "created_at" <= 1764590000000 AND NOT EXISTS (SELECT 1 FROM "promises_listener" WHERE "promise_id" = 'pg-' || :n) AND NOT EXISTS (SELECT 1 FROM "promises_callback" WHERE "awaited_id" = 'pg-' || :n) AND current_setting('floor.held', true) = 'pg-' || :n), s0 AS (UPDATE "promises_promise" SET "state" = v.column2, "value" = v.column3, "settled_at" = v.column4, "timeout_armed" = v.column5 FROM (VALUES (CAST('pg-' || :n AS text), CAST('resolved' AS varchar(17)), CAST('{"data": "NDI="}'::jsonb AS jsonb), CAST(1764590000000 AS bigint), CAST(false AS boolean))) v WHERE "promises_promise"."id" = v.column1 AND EXISTS (SELECT 1 FROM provided)), s1 AS (UPDATE "tasks_task" SET "state" = 'fulfilled', "pid" = NULL, "ttl" = NULL, "resumes" = '[]'::jsonb, "timeout_kind" = NULL, "timeout_at" = NULL WHERE "id" = 'pg-' || :n AND EXISTS (SELECT 1 FROM provided)), s2 AS (DELETE FROM "promises_callback" WHERE "awaiter_id" IN ('pg-' || :n) AND "awaited_id" NOT IN ('pg-' || :n) AND EXISTS (SELECT 1 FROM provided)) SELECT count(*) FROM provided;
\endpipeline
