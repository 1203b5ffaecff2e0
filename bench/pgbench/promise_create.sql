-- What a promise.create with a target sends (floor.rows.insert_unless_exists): one statement, in
-- autocommit, that inserts the promise, its task and its execute message unless the id exists (then it
-- returns that promise). Prepared, as the server prepares it (floor.rows.cursor_of); the variables are
-- typed as the server's parameters are (chr(58) is a colon pgbench would read as a variable). Nobody listens
-- to the group in the benchmark, so the message is written with its attempt recorded as one that found no
-- stream (outbox.delivery.claim_on_write), as the server writes it.
\set n random(1, 1000000000000)
WITH head AS (INSERT INTO "promises_promise" ("id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch")
    VALUES (('pb-' || :client_id::text || '-' || :n::text)::text, 'pending'::varchar(17), '{"data": "eyJmdW5jIjoiZiJ9"}'::jsonb, '{}'::jsonb, ('{"resonate' || chr(58) || 'target": "poll://any@bench"}')::jsonb, 4102444800000::bigint, 1764590000000::bigint, NULL::bigint, true::boolean, false::boolean, NULL::text)
    ON CONFLICT ("id") DO NOTHING RETURNING 1),
  d0 AS (INSERT INTO "tasks_task" ("id", "state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at")
    SELECT ('pb-' || :client_id::text || '-' || :n::text)::text, 'pending'::varchar(9), 0::bigint, NULL::text, NULL::bigint, '[]'::jsonb, 0::smallint, 1764590060000::bigint FROM head RETURNING 1),
  d1 AS (INSERT INTO "outbox_message" ("key", "kind", "subject", "address", "data", "created_at", "state", "attempts", "next_attempt_at", "delivered_at", "unreached_since", "last_error")
    SELECT ('e' || chr(58) || 'pb-' || :client_id::text || '-' || :n::text)::text, 'execute'::varchar(7), ('pb-' || :client_id::text || '-' || :n::text)::text, 'poll://any@bench'::text, ('{"task": {"id": "pb-' || :client_id::text || '-' || :n::text || '", "version": 0}}')::jsonb, 1764590000000::bigint, 'pending'::varchar(9), 1::integer, 1764590000500::bigint, NULL::bigint, 1764590000000::bigint, 'no live poll connection for this address'::text FROM head
    ON CONFLICT ("key") DO UPDATE SET "address" = EXCLUDED."address", "data" = EXCLUDED."data", "created_at" = EXCLUDED."created_at", "state" = EXCLUDED."state", "attempts" = EXCLUDED."attempts", "next_attempt_at" = EXCLUDED."next_attempt_at", "delivered_at" = EXCLUDED."delivered_at", "unreached_since" = EXCLUDED."unreached_since", "last_error" = EXCLUDED."last_error" RETURNING 1)
SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM head
UNION ALL SELECT false, "id", "state", "param", "value", "tags", "timeout_at", "created_at", "settled_at", "timeout_armed", "timer", "branch" FROM "promises_promise" WHERE "id" = ('pb-' || :client_id::text || '-' || :n::text);
