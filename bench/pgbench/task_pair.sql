-- What task.create (a new promise, its task acquired by the caller) and then task.fulfill of the same id
-- send: creation as one statement in autocommit (task.create's first step, floor.rows.insert_unless_exists),
-- then the fulfilment as promise.settle's one query string (tasks.handlers.task_fulfill_at_once,
-- promises.engine.settle_if): the promise locked and read, its key noted as held; then the settlement's writes,
-- made only if it is live with nothing registered on it and its task is acquired at the caller's version
-- (tasks.models.held_and_unregistered); here a pipeline of prepared statements, one round trip. Prepared
-- (-M prepared), as the server prepares its statements. (chr(58) is the colon of resonate:target, which pgbench
-- would read as a variable.)
\set n random(1, 1000000000000)
WITH head AS (INSERT INTO "promises_promise" ("id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch")
    VALUES (('pt-' || :client_id::text || '-' || :n::text)::text, 'pending'::varchar(17), '{}'::jsonb, '{}'::jsonb, ('{"resonate' || chr(58) || 'target": "poll://any@bench"}')::jsonb, 4102444800000::bigint, 1764590000000::bigint, NULL::bigint, true::boolean, false::boolean, NULL::text)
    ON CONFLICT ("id") DO NOTHING RETURNING 1),
  d0 AS (INSERT INTO "tasks_task" ("id", "state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at")
    SELECT ('pt-' || :client_id::text || '-' || :n::text)::text, 'acquired'::varchar(9), 1::bigint, 'bench'::text, 60000::bigint, '[]'::jsonb, 1::smallint, 1764590060000::bigint FROM head RETURNING 1)
SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM head
UNION ALL SELECT false, "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" = ('pt-' || :client_id::text || '-' || :n::text);
\startpipeline
SELECT held.*, set_config('floor.held', held."id"::text, true) FROM (SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" IN ('pt-' || :client_id::text || '-' || :n::text) ORDER BY "id" DESC FOR UPDATE) AS held;
WITH provided AS MATERIALIZED (SELECT 1 FROM "promises_promise" WHERE "id" = 'pt-' || :client_id::text || '-' || :n::text AND "state" = 'pending' AND "timeout_at" > 1764590000000 AND "created_at" <= 1764590000000 AND NOT EXISTS (SELECT 1 FROM "promises_listener" WHERE "promise_id" = 'pt-' || :client_id::text || '-' || :n::text) AND NOT EXISTS (SELECT 1 FROM "promises_callback" WHERE "awaited_id" = 'pt-' || :client_id::text || '-' || :n::text) AND EXISTS (SELECT 1 FROM "tasks_task" WHERE "id" = 'pt-' || :client_id::text || '-' || :n::text AND "state" = 'acquired' AND "version" = 1) AND current_setting('floor.held', true) = 'pt-' || :client_id::text || '-' || :n::text), s0 AS (UPDATE "promises_promise" SET "state" = v.column2, "value" = v.column3, "settled_at" = v.column4, "timeout_armed" = v.column5 FROM (VALUES (CAST('pt-' || :client_id::text || '-' || :n::text AS text), CAST('resolved' AS varchar(17)), CAST('{"data": "NDI="}'::jsonb AS jsonb), CAST(1764590000000 AS bigint), CAST(false AS boolean))) v WHERE "promises_promise"."id" = v.column1 AND EXISTS (SELECT 1 FROM provided)), s1 AS (UPDATE "tasks_task" SET "state" = 'fulfilled', "pid" = NULL, "ttl" = NULL, "resumes" = '[]'::jsonb, "timeout_kind" = NULL, "timeout_at" = NULL WHERE "id" = 'pt-' || :client_id::text || '-' || :n::text AND EXISTS (SELECT 1 FROM provided)), s2 AS (DELETE FROM "promises_callback" WHERE "awaiter_id" IN ('pt-' || :client_id::text || '-' || :n::text) AND "awaited_id" NOT IN ('pt-' || :client_id::text || '-' || :n::text) AND EXISTS (SELECT 1 FROM provided)) SELECT count(*) FROM provided;
\endpipeline
