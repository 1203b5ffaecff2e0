-- What task.create (a new promise, its task acquired by the caller) and then task.fulfill of the same id
-- send: creation as one statement in autocommit (task.create's first step, floor.rows.insert_unless_exists),
-- then a transaction for the fulfilment in two query strings of statements the connection prepared once, each
-- sent as an EXECUTE (floor.rows.send_all; here two pipelines of prepared statements, one round trip each): BEGIN,
-- the promise's lock, its task's read, what is registered on it and its awaiters locked with their tasks read
-- (TaskQuerySet.locked_all, floor.rows.lock_then_query); then the settlement's writes with COMMIT
-- (floor.rows.at_commit). Prepared (-M prepared), as the server prepares its statements. (chr(58) is the colon of
-- resonate:target, which pgbench would read as a variable.)
\set n random(1, 1000000000000)
WITH head AS (INSERT INTO "promises_promise" ("id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch")
    VALUES (('pt-' || :client_id::text || '-' || :n::text)::text, 'pending'::varchar(17), '{}'::jsonb, '{}'::jsonb, ('{"resonate' || chr(58) || 'target": "poll://any@bench"}')::jsonb, 4102444800000::bigint, 1764590000000::bigint, NULL::bigint, true::boolean, false::boolean, NULL::text)
    ON CONFLICT ("id") DO NOTHING RETURNING 1),
  d0 AS (INSERT INTO "tasks_task" ("id", "state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at")
    SELECT ('pt-' || :client_id::text || '-' || :n::text)::text, 'acquired'::varchar(9), 1::bigint, 'bench'::text, 60000::bigint, '[]'::jsonb, 1::smallint, 1764590060000::bigint FROM head RETURNING 1)
SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM head
UNION ALL SELECT false, "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" = ('pt-' || :client_id::text || '-' || :n::text);
\startpipeline
BEGIN;
SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" IN ('pt-' || :client_id::text || '-' || :n::text) ORDER BY "id" DESC FOR UPDATE ;
SELECT "id", "state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at" FROM "tasks_task" WHERE "id" IN ('pt-' || :client_id::text || '-' || :n::text) ORDER BY "id" ASC;
SELECT NULL WHERE EXISTS (SELECT 1 FROM "promises_listener" WHERE "promise_id" = 'pt-' || :client_id::text || '-' || :n::text) UNION ALL SELECT "awaiter_id" FROM "promises_callback" WHERE "awaited_id" = 'pt-' || :client_id::text || '-' || :n::text;
SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" IN (SELECT "awaiter_id" FROM "promises_callback" WHERE "awaited_id" = 'pt-' || :client_id::text || '-' || :n::text AND "awaiter_id" <> 'pt-' || :client_id::text || '-' || :n::text) ORDER BY "id" DESC FOR UPDATE;
SELECT "id", "state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at" FROM "tasks_task" WHERE "id" IN (SELECT "awaiter_id" FROM "promises_callback" WHERE "awaited_id" = 'pt-' || :client_id::text || '-' || :n::text AND "awaiter_id" <> 'pt-' || :client_id::text || '-' || :n::text);
\endpipeline
\startpipeline
UPDATE "promises_promise" SET "state" = v.column2, "value" = v.column3, "settled_at" = v.column4, "timeout_armed" = v.column5 FROM (VALUES (CAST('pt-' || :client_id::text || '-' || :n::text AS text), CAST('resolved' AS varchar(17)), CAST('{"data": "NDI="}'::jsonb AS jsonb), CAST(1764590000000 AS bigint), CAST(false AS boolean))) v WHERE "promises_promise"."id" = v.column1;
UPDATE "tasks_task" SET "state" = 'fulfilled', "pid" = NULL, "ttl" = NULL, "resumes" = '[]'::jsonb, "timeout_kind" = NULL, "timeout_at" = NULL WHERE "id" = 'pt-' || :client_id::text || '-' || :n::text;
DELETE FROM "promises_callback" WHERE "awaiter_id" IN ('pt-' || :client_id::text || '-' || :n::text) AND "awaited_id" NOT IN ('pt-' || :client_id::text || '-' || :n::text);
COMMIT;
\endpipeline
