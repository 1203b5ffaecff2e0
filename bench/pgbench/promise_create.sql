-- The SQL a promise.create with a target runs: read, insert promise, task and execute message.
\set n random(1, 1000000000000)
BEGIN;
SELECT id, state, param, value, tags, timeout_at, created_at, settled_at FROM promises_promise WHERE id = 'pb-' || :client_id || '-' || :n;
INSERT INTO promises_promise (id, state, param, value, tags, timeout_at, created_at, settled_at, timeout_armed, timer, branch)
  VALUES ('pb-' || :client_id || '-' || :n, 'pending', '{"data": "eyJmdW5jIjoiZiJ9"}', '{}', '{"resonate:target": "poll://any@bench"}', 4102444800000, 1, NULL, true, false, NULL)
  ON CONFLICT DO NOTHING;
INSERT INTO tasks_task (id, state, version, pid, ttl, resumes, timeout_kind, timeout_at)
  VALUES ('pb-' || :client_id || '-' || :n, 'pending', 0, NULL, NULL, '[]', 0, 5001)
  ON CONFLICT DO NOTHING;
INSERT INTO outbox_message (key, kind, subject, address, data, created_at, state, attempts, next_attempt_at, delivered_at, last_error)
  VALUES ('e:pb-' || :client_id || '-' || :n, 'execute', 'pb-' || :client_id || '-' || :n, 'poll://any@bench', '{"task": {"id": "x", "version": 0}}', 1, 'pending', 0, 1, NULL, '')
  ON CONFLICT (key) DO UPDATE SET address = EXCLUDED.address, data = EXCLUDED.data, state = EXCLUDED.state;
COMMIT;
