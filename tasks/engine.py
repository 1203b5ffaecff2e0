"""Task machinery shared by handlers and timeouts: enqueueResume, fulfilment, the two task timeouts, preload."""

from functools import cache

from floor import rows
from floor.conf import resonate_settings
from floor.protocol import DELAY, later
from outbox.messages import execute, set_execute, set_executes, setting_messages
from promises.models import Callback, Promise, PromiseState
from tasks.models import Task, TaskState, TimeoutKind


def retry_at(now):
    return later(now, resonate_settings.RETRY_TIMEOUT_MS)


def send_execute(task, now):
    """Queue execute(task, version) to the target of the task's promise; "" when it has none (as the spec does)."""
    set_execute(task.promise.target or "", task, now)


def new_task(promise, now, holder=None):
    """The task a promise is created with (P-02, T-02), unsaved, and the messages to store with it.

    A promise born settled (created at or past its deadline) has a fulfilled task. One created by task.create
    is acquired at once by its `holder`, (pid, ttl). Otherwise the task is pending: its execute is sent now,
    or held back by its retry timeout until resonate:delay.
    """
    task = rows.new(Task, promise=promise, version=0)
    if not promise.is_pending:
        task.to_fulfilled()
        return task, []
    if holder is not None:
        task.to_acquired(*holder, now)
        return task, []
    delay = int(promise.tags.get(DELAY, 0))
    if delay > now:
        task.to_pending(delay)
        return task, []
    task.to_pending(retry_at(now))
    return task, [execute(promise.target or "", task, now)]


def return_to_pending(task, now):
    """A task goes back to pending with a retry timeout and an execute to its target; the version is kept."""
    task.to_pending(retry_at(now))
    task.write()
    send_execute(task, now)


def acquire(task, pid, ttl, now):
    """A pending task (its promise attached) is acquired (T-02, T-03): leased to pid, and stored. Returns its
    preload, read with the write (one round trip on PostgreSQL)."""
    task.to_acquired(pid, ttl, now)
    promise = task.promise
    if promise.branch is None:
        rows.at_commit([task.writing()])  # sent with the commit
        return []
    return records(rows.write_then_fetch(task.writing(), Promise, _same_branch(), [promise.branch, promise.id]), now)


def acquire_at_once(task_id, version, pid, ttl, now):
    """T-03 in one round trip without a transaction (PostgreSQL): the task acquired, with its promise attached,
    and its preload's promises; None when it was not acquired (not pending at `version`, its promise not live,
    absent) or elsewhere than on PostgreSQL: the caller then acquires in a transaction, which says why.

    The promise is locked first, as for every task write, by a MATERIALIZED CTE; the task is then written only
    if it is pending at that version and its promise live, conditions checked on the rows as they stand once the
    lock is held (a locked row, and a row updated meanwhile, are read again by READ COMMITTED). The promise and
    the preload are read by statements of their own, after the write, while the lock is still held (rows.send_all:
    the three run as one transaction). The values are those of Task.to_acquired.
    """
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    acquired = rows.new(Task, version=0)
    acquired.to_acquired(pid, ttl, now)  # the version goes up in SQL: a version of 2^63-1 is only ever stale
    leased = [rows.prepare(Task._meta.get_field(name), getattr(acquired, name), connection) for name in _LEASED]
    writing, reading_promise, reading_branch = _acquiring()
    written, promise, branch = rows.send_all(
        connection,
        [
            (writing, [task_id, *leased, TaskState.PENDING, version, PromiseState.PENDING, now]),
            (reading_promise, [task_id]),
            (reading_branch, [task_id, task_id]),
        ],
    )
    if not written:
        return None
    (task,), (task.promise,) = rows.instances(Task, written), rows.instances(Promise, promise)
    return task, rows.instances(Promise, branch)


_LEASED = ("state", "pid", "ttl", "resumes", "timeout_kind", "timeout_at")  # what to_acquired sets, but the version


@cache
def _acquiring():
    """acquire_at_once's statements: the write, the promise's read, the preload's read."""
    table, promises = rows.quote(Task._meta.db_table), rows.quote(Promise._meta.db_table)
    assignments = ", ".join(['"version" = t."version" + 1', *(f"{rows.quote(name)} = %s" for name in _LEASED)])
    branch = f'(SELECT "branch" FROM {promises} WHERE "id" = %s)'
    return (
        f'WITH held AS MATERIALIZED (SELECT "id", "state", "timeout_at" FROM {promises} WHERE "id" = %s FOR UPDATE)'
        f" UPDATE {table} t SET {assignments}"
        f' FROM held WHERE t."id" = held."id" AND t."state" = %s AND t."version" = %s'
        f' AND held."state" = %s AND held."timeout_at" > %s'
        f" RETURNING {', '.join(f't.{column}' for column in rows.columns(Task).split(', '))}",
        f'SELECT {rows.columns(Promise)} FROM {promises} WHERE "id" = %s',
        f'SELECT {rows.columns(Promise)} FROM {promises} WHERE {_in_branch(branch)} ORDER BY "id"',
    )


def suspend(task, awaited_ids):
    """A held task waits for these live promises (T-06): their callbacks registered and the task stored
    suspended, sent with the commit on PostgreSQL (rows.at_commit)."""
    task.to_suspended()
    callbacks = [Callback.registering(awaited_ids, task.id)] if awaited_ids else []
    rows.at_commit([*callbacks, task.writing()])


def fulfilling(task_ids):
    """The tasks of settled promises are done, as Task.to_fulfilled leaves a task (where there is a task)."""
    done = rows.new(Task)
    done.to_fulfilled()
    return rows.setting(done, "state", "pid", "ttl", "resumes", "timeout_kind", "timeout_at", pks=task_ids)


def enqueue_resume(awaited_id, awaiter_id, now, locked=None):
    """Wake the awaiter's task because `awaited_id` settled (spec 00-resume.lean). `locked`: {id: task} of the
    awaiters the caller has locked and read already (with the settled promise's own lock, Promise.awaiting_tasks,
    or after its settlement's writes, TaskQuerySet.locked_all_after), else it is locked here."""
    task = Task.objects.locked(awaiter_id) if locked is None else locked.get(awaiter_id)
    if task is None:
        return
    if task.state == TaskState.SUSPENDED:
        task.to_pending(retry_at(now))
        task.resumes = [awaited_id]
        writes = [task.writing()]
        if task.promise.target:  # sent with the task's write, and with the commit on PostgreSQL
            writes.append(setting_messages([execute(task.promise.target, task, now)]))
        rows.at_commit(writes)
    elif task.state != TaskState.FULFILLED and awaited_id not in task.resumes:
        task.resumes.append(awaited_id)
        rows.at_commit([task.writing("resumes")])


def on_task_retry_timeout(task_ids, now):
    """Pending tasks' retry timeouts fired: re-send each one's execute and re-arm it (02-timeouts.lean).

    A batch at a time, one statement per step, in firing order. The tasks' promise rows are locked first
    (the lock that guards a task; the sweep's claim holds them already), and the guard is re-checked in
    the update: still pending, and its retry still due (a release may have re-armed it meanwhile).
    """
    promises = Promise.objects.lock_all(task_ids)
    table = rows.quote(Task._meta.db_table)
    rearmed = dict(
        rows.query(
            f'UPDATE {table} SET "timeout_at" = %s WHERE "id" IN ({rows.placeholders(task_ids)})'
            f' AND "state" = %s AND "timeout_kind" = %s AND "timeout_at" <= %s RETURNING "id", "version"',
            [retry_at(now), *task_ids, TaskState.PENDING, TimeoutKind.RETRY, now],
        )
    )
    executes = [(promises[id].target or "", id, rearmed[id]) for id in task_ids if id in rearmed]
    if executes:
        set_executes(executes, now)


def on_task_lease_timeout(task_id, now):
    """An acquired task's lease lapsed: back to pending, same version, execute re-sent (02-timeouts.lean).

    The guard is re-checked under the lock: a heartbeat that committed after the sweep found the lease
    due has renewed it, and it has not lapsed.
    """
    task = Task.objects.locked(task_id)
    if task is None or task.state != TaskState.ACQUIRED:
        return
    if task.timeout_kind != TimeoutKind.LEASE or task.timeout_at > now:
        return
    return_to_pending(task, now)


def preload(promise, now):
    """Records of the promises sharing the task promise's resonate:branch, by id (decision D6), projected."""
    if promise.branch is None:
        return []
    return records(rows.fetch_sql(Promise, _same_branch(), [promise.branch, promise.id]), now)


def records(promises, now):
    return [p.projected(now).to_record() for p in promises]


def read_for_fence(task_id, promise_id):
    """(the task with its promise, the promise `promise_id`, the task's preload: its promise's branch), each None
    or [] when absent, read by one statement (a fence that writes nothing is answered from it: task_fence_read)."""
    table = rows.quote(Promise._meta.db_table)
    own, wanted, branch = rows.fetch_with(
        Promise,
        Task,
        [
            ('m."id" = %s', [task_id]),
            ('m."id" = %s', [promise_id]),
            (_in_branch(f'(SELECT "branch" FROM {table} WHERE "id" = %s)', alias="m."), [task_id, task_id]),
        ],
    )
    task = None
    if own and own[0][1] is not None:
        task = own[0][1]
        task.promise = own[0][0]
    return task, (wanted[0] if wanted else None), branch


@cache
def _same_branch():
    """The preload query, by the promise_branch index (an ORM query compiled per call costs more than it runs)."""
    table = rows.quote(Promise._meta.db_table)
    return f'SELECT {rows.columns(Promise)} FROM {table} WHERE {_in_branch("%s")} ORDER BY "id"'


def _in_branch(branch, alias=""):
    """Preload's rule (decision D6) as a condition: the promises of `branch` (SQL), but the task's own (%s)."""
    return f'{alias}"branch" = {branch} AND {alias}"id" <> %s'


def stale_executes(messages):
    """{key: why} for the execute messages whose task is no longer pending at the version they carry.

    Its promise was settled or cancelled, or the task was acquired since: a worker would only get a 409, so
    the outbox drops the message instead of retrying it for the poll grace (registered in tasks/apps.py).
    Whenever a task is pending again it gets an execute of its own.
    """
    wanted = {m.subject: m.data["task"]["version"] for m in messages}
    pending = rows.query(
        f'SELECT "id", "version" FROM {rows.quote(Task._meta.db_table)} WHERE "state" = %s'
        f' AND "id" IN ({rows.placeholders(wanted)})',
        [TaskState.PENDING, *wanted],
    )
    current = set(map(tuple, pending))
    return {
        m.key: f"task {m.subject} is no longer pending at version {wanted[m.subject]}"
        for m in messages
        if (m.subject, wanted[m.subject]) not in current
    }
