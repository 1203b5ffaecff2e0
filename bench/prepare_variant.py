"""Settings for a process that runs one of issue 26's three designs of statements sent together (bench only).

    DJANGO_SETTINGS_MODULE=prepare_variant PYTHONPATH=bench RESONATE_PREPARE_DESIGN=a|b|c

a: as the code stands (floor.rows.send_all prepares statements sent together by name).
b: the hot paths' statements sent together become PL/pgSQL functions (FUNCTIONS, created in the database by
   bench/prepare_designs.py), each called as one statement; nothing is prepared by name.
c: nothing is prepared by name: statements sent together go as one client-bound string, planned at each call.
In all three, a statement sent alone is prepared by psycopg (DATABASE_PREPARE_THRESHOLD).

The patches are applied once Django's apps are loaded (Design.ready), in every process that reads these
settings: `manage.py serve`'s server processes import them anew.
"""

import os

from django.apps import AppConfig

from resonate_site.settings import *  # noqa: F403
from resonate_site.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "prepare_variant.Design"]

DESIGN = os.environ.get("RESONATE_PREPARE_DESIGN", "a")


class Design(AppConfig):
    name = "prepare_variant"
    label = "prepare_variant"

    def ready(self):
        if DESIGN in ("b", "c"):
            without_names()
        if DESIGN == "b":
            with_functions()


def without_names():
    """Nothing prepared by name: send_all's bookkeeping sees no threshold, and sends its parts as they are."""
    from floor import rows

    def unprepared(self, threshold):
        original(self, None)

    original = rows._Prepared.__init__
    rows._Prepared.__init__ = unprepared


# The writes of a settlement (promises.engine.settlement) with nothing registered: the promise written, its timeout
# disarmed; its task fulfilled (the values Task.to_fulfilled leaves, passed in); the scrub (Callback.scrubbing).
SETTLEMENT = """
CREATE OR REPLACE FUNCTION bench_settlement(
    p_id text, p_state text, p_value jsonb, p_settled_at bigint,
    t_state text, t_pid text, t_ttl bigint, t_resumes jsonb, t_timeout_kind smallint, t_timeout_at bigint
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE promises_promise SET state = p_state, value = p_value, settled_at = p_settled_at, timeout_armed = false
        WHERE id = p_id;
    UPDATE tasks_task SET state = t_state, pid = t_pid, ttl = t_ttl, resumes = t_resumes,
        timeout_kind = t_timeout_kind, timeout_at = t_timeout_at
        WHERE id = p_id;
    DELETE FROM promises_callback WHERE awaiter_id = p_id AND awaited_id <> p_id;
END $$;
"""

# promise.settle's first step (promises.engine.settle_at_once): the promise locked; settled only if it is live with
# nothing registered (promises.models.live_and_unregistered), which the lock then holds. The promise as it stands.
SETTLE_AT_ONCE = """
CREATE OR REPLACE FUNCTION bench_settle_at_once(
    p_id text, p_state text, p_value jsonb, p_now bigint,
    t_state text, t_pid text, t_ttl bigint, t_resumes jsonb, t_timeout_kind smallint, t_timeout_at bigint
) RETURNS SETOF promises_promise LANGUAGE plpgsql AS $$
DECLARE
    locked promises_promise;
BEGIN
    SELECT * INTO locked FROM promises_promise WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF locked.state = 'pending' AND locked.timeout_at > p_now
        AND NOT EXISTS (SELECT 1 FROM promises_listener WHERE promise_id = p_id)
        AND NOT EXISTS (SELECT 1 FROM promises_callback WHERE awaited_id = p_id)
    THEN
        PERFORM bench_settlement(p_id, p_state, p_value, p_now,
            t_state, t_pid, t_ttl, t_resumes, t_timeout_kind, t_timeout_at);
        locked.state := p_state;
        locked.value := p_value;
        locked.settled_at := p_now;
        locked.timeout_armed := false;
    END IF;
    RETURN NEXT locked;
END $$;
"""

# task.fulfill's lock with its reads (TaskQuerySet.locked_to_settle): the promise locked, then its task, what is
# registered on it (promises.models.registered_on), and its awaiters locked with their tasks (awaiters_of), as rows
# tagged by part: 0 the promise and its task; 1 a registration (awaiter NULL: it has listeners); 2 an awaiter,
# locked; 3 an awaiter's task.
LOCK_TO_SETTLE = """
CREATE OR REPLACE FUNCTION bench_lock_to_settle(p_id text)
RETURNS TABLE (part int, awaiter text, promise promises_promise, task tasks_task) LANGUAGE plpgsql AS $$
DECLARE
    locked promises_promise;
    awaited boolean := false;
BEGIN
    SELECT * INTO locked FROM promises_promise p WHERE p.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT 0, NULL::text, locked, (SELECT t FROM tasks_task t WHERE t.id = p_id);
    IF EXISTS (SELECT 1 FROM promises_listener l WHERE l.promise_id = p_id) THEN
        RETURN QUERY SELECT 1, NULL::text, NULL::promises_promise, NULL::tasks_task;
    END IF;
    FOR awaiter IN SELECT c.awaiter_id FROM promises_callback c WHERE c.awaited_id = p_id LOOP
        awaited := true;
        part := 1;
        promise := NULL;
        task := NULL;
        RETURN NEXT;
    END LOOP;
    IF awaited THEN
        RETURN QUERY SELECT 2, NULL::text, p, NULL::tasks_task FROM promises_promise p
            WHERE p.id IN (SELECT c.awaiter_id FROM promises_callback c
                           WHERE c.awaited_id = p_id AND c.awaiter_id <> p_id)
            ORDER BY p.id DESC FOR UPDATE OF p;
        RETURN QUERY SELECT 3, NULL::text, NULL::promises_promise, t FROM tasks_task t
            WHERE t.id IN (SELECT c.awaiter_id FROM promises_callback c
                           WHERE c.awaited_id = p_id AND c.awaiter_id <> p_id);
    END IF;
END $$;
"""

FUNCTIONS = [SETTLEMENT, SETTLE_AT_ONCE, LOCK_TO_SETTLE]


def with_functions():
    """The hot paths' statements sent together as the functions above, each one statement."""
    from promises import engine, handlers
    from tasks.models import TaskQuerySet

    engine.settle_all = _settling_by_function(engine.settle_all)
    engine.settle_at_once = handlers.settle_at_once = _settle_at_once
    TaskQuerySet.locked_to_settle = _locked_to_settle


def _fulfilled_params(connection):
    from floor import rows
    from tasks.models import Task

    done = rows.new(Task)
    done.to_fulfilled()
    names = ("state", "pid", "ttl", "resumes", "timeout_kind", "timeout_at")
    return [rows.prepare(Task._meta.get_field(name), getattr(done, name), connection) for name in names]


def _settling_params(promise, connection):
    from floor import rows
    from promises.models import Promise

    value = rows.prepare(Promise._meta.get_field("value"), promise.value, connection)
    return [promise.id, promise.state, value, promise.settled_at, *_fulfilled_params(connection)]


def _settling_by_function(settle_all):
    def settle_all_by_function(promises, now):
        from django.db import connection

        from floor import rows

        if connection.vendor != "postgresql" or len(promises) != 1 or not promises[0].unregistered:
            return settle_all(promises, now)
        (promise,) = promises
        promise.timeout_armed = False
        params = _settling_params(promise, connection)
        rows.at_commit([rows.Statement(f"SELECT bench_settlement({', '.join(['%s'] * len(params))})", params)])
        return None

    return settle_all_by_function


def _settle_at_once(promise_id, state, value, now):
    from django.db import connection

    from floor import rows
    from promises.models import Promise

    if connection.vendor != "postgresql":
        return None
    settling = rows.new(Promise, id=promise_id, state=state, value=value, settled_at=now)
    params = _settling_params(settling, connection)
    sql = f"SELECT {rows.columns(Promise)} FROM bench_settle_at_once({', '.join(['%s'] * len(params))})"
    return rows.instances(Promise, rows.query(sql, params))


def _locked_to_settle(self, task_id):
    from floor import rows
    from promises.models import Promise, knowing_registrations

    found = rows.query("SELECT part, awaiter, (promise).*, (task).* FROM bench_lock_to_settle(%s)", [task_id])
    if not found:
        return None
    width = len(Promise._meta.concrete_fields)
    parts = {0: [], 1: [], 2: [], 3: []}
    for part, awaiter, *row in found:
        parts[part].append((awaiter, row[:width], row[width:]))
    ((_, promise_row, task_row),) = parts[0]
    (promise,) = rows.instances(Promise, [promise_row])
    settled = knowing_registrations(promise, [(awaiter,) for awaiter, _, _ in parts[1]])
    awaiting = rows.instances(Promise, [row for _, row, _ in parts[2]])
    settled.awaiting_tasks = self._attached(awaiting, [row for _, _, row in parts[3]])[1]
    if task_row[0] is None:
        return None
    (task,) = rows.instances(self.model, [task_row])
    task.promise = promise
    return task
