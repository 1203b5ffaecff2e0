-- The SQL of task.create (new promise, acquired task) followed by task.fulfill of the same id.
\set n random(1, 1000000000000)
BEGIN;
SELECT id, state, tags FROM promises_promise WHERE id = 'pt-' || :client_id || '-' || :n FOR UPDATE;
INSERT INTO promises_promise (id, state, param, value, tags, timeout_at, created_at, settled_at, timeout_armed, timer, branch)
  VALUES ('pt-' || :client_id || '-' || :n, 'pending', '{}', '{}', '{"resonate:target": "poll://any@bench"}', 4102444800000, 1, NULL, true, false, NULL)
  ON CONFLICT DO NOTHING;
INSERT INTO tasks_task (id, state, version, pid, ttl, resumes, timeout_kind, timeout_at)
  VALUES ('pt-' || :client_id || '-' || :n, 'acquired', 1, 'bench', 60000, '[]', 1, 60001)
  ON CONFLICT DO NOTHING;
COMMIT;
BEGIN;
SELECT id, state, tags, timeout_at FROM promises_promise WHERE id = 'pt-' || :client_id || '-' || :n FOR UPDATE;
SELECT id, state, version FROM tasks_task WHERE id = 'pt-' || :client_id || '-' || :n;
SELECT address FROM promises_listener WHERE promise_id = 'pt-' || :client_id || '-' || :n;
SELECT awaiter_id FROM promises_callback WHERE awaited_id = 'pt-' || :client_id || '-' || :n;
UPDATE promises_promise SET state = 'resolved', value = '{"data": "NDI="}', settled_at = 2, timeout_armed = false WHERE id = 'pt-' || :client_id || '-' || :n;
UPDATE tasks_task SET state = 'fulfilled', pid = NULL, ttl = NULL, resumes = '[]', timeout_kind = NULL, timeout_at = NULL WHERE id = 'pt-' || :client_id || '-' || :n;
DELETE FROM promises_callback WHERE awaiter_id = 'pt-' || :client_id || '-' || :n;
COMMIT;
