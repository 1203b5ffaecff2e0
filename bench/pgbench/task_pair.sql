-- What task.create (a new promise, its task acquired by the caller) and then task.fulfill of the same id
-- send, as the server sends them: two pipelined transactions (promises/transactions.py Mode.PIPELINED).
-- Run with pgbench -M extended (pipelines need the extended protocol, which the server's pipeline uses too).
\set n random(1, 1000000000000)
\startpipeline
BEGIN;
SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" = 'pt-' || :client_id || '-' || :n FOR UPDATE;
\endpipeline
\startpipeline
WITH head AS (INSERT INTO "promises_promise" ("id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch")
    VALUES (('pt-' || :client_id || '-' || :n)::text, 'pending'::varchar(17), '{}'::jsonb, '{}'::jsonb, '{"resonate:target": "poll://any@bench"}'::jsonb, 4102444800000::bigint, 1764590000000::bigint, NULL::bigint, true::boolean, false::boolean, NULL::text)
    ON CONFLICT ("id") DO NOTHING RETURNING 1),
  d0 AS (INSERT INTO "tasks_task" ("id", "state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at")
    SELECT ('pt-' || :client_id || '-' || :n)::text, 'acquired'::varchar(9), 1::bigint, 'bench'::text, 60000::bigint, '[]'::jsonb, 1::smallint, 1764590060000::bigint FROM head RETURNING 1)
SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM head
UNION ALL SELECT false, "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" = ('pt-' || :client_id || '-' || :n);
\endpipeline
\startpipeline
COMMIT;
\endpipeline
\startpipeline
BEGIN;
SELECT "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" = 'pt-' || :client_id || '-' || :n FOR UPDATE;
\endpipeline
\startpipeline
SELECT "id", "state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at" FROM "tasks_task" WHERE "id" = 'pt-' || :client_id || '-' || :n;
\endpipeline
\startpipeline
DELETE FROM "promises_listener" WHERE "promise_id" IN ('pt-' || :client_id || '-' || :n) RETURNING "promise_id", "address";
DELETE FROM "promises_callback" WHERE "awaited_id" IN ('pt-' || :client_id || '-' || :n) RETURNING "id", "awaited_id", "awaiter_id";
\endpipeline
\startpipeline
UPDATE "promises_promise" SET "state" = 'resolved', "value" = '{"data": "NDI="}'::jsonb, "settled_at" = 1764590000000, "timeout_armed" = false WHERE "id" = 'pt-' || :client_id || '-' || :n;
UPDATE "tasks_task" SET "state" = 'fulfilled', "pid" = NULL, "ttl" = NULL, "resumes" = '[]', "timeout_kind" = NULL, "timeout_at" = NULL WHERE "id" IN ('pt-' || :client_id || '-' || :n);
DELETE FROM "promises_callback" WHERE "awaiter_id" IN ('pt-' || :client_id || '-' || :n);
COMMIT;
\endpipeline
