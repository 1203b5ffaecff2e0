"""Tasks: the unit of work behind a targeted promise, with its lease and its single timeout."""

import copy
from functools import cache

from django.db import connection, models
from django.db.models import Q

from floor import rows
from floor.protocol import I64_MAX, later
from promises.models import (
    Promise,
    PromiseState,
    awaiters_of,
    knowing_registrations,
    live_and_unregistered,
    registered_on,
)


class TaskState(models.TextChoices):
    PENDING = "pending"
    ACQUIRED = "acquired"
    SUSPENDED = "suspended"
    HALTED = "halted"
    FULFILLED = "fulfilled"


class TimeoutKind(models.IntegerChoices):
    RETRY = 0  # a pending task's execute is re-sent
    LEASE = 1  # an acquired task's lease expires


class TaskQuerySet(models.QuerySet):
    def with_projected_state(self, state, now):
        """Tasks whose projected state at `now` (see Task.projected) is `state`."""
        live = Q(promise__state=PromiseState.PENDING, promise__timeout_at__gt=now)
        if state == TaskState.FULFILLED:
            return self.filter(Q(state=state) | ~live)
        return self.filter(live, state=state)


class TaskRows:
    """The protocol's reads and locks of task rows by id, on the manager itself (as promises.models.PromiseRows)."""

    def find(self, task_id):
        """The task with this id, or None."""
        return rows.fetch(self.model, task_id)

    def with_promise(self, task_id):
        """The task with its promise loaded (None if there is no task), both read by one statement: one snapshot. Read
        apart, an acquire and a settle committed between the two reads made a task that never was (fulfilled at the
        version before the acquire), found by the linearizability checker (tests/linearizability)."""
        (own,) = rows.fetch_with(Promise, self.model, [('m."id" = %s', [task_id])])
        if not own or own[0][1] is None:
            return None
        promise, task = own[0]
        task.promise = promise
        return task

    def locked(self, task_id):
        """The task with its promise, for writing: the promise row is locked, and it guards the task too."""
        return self.locked_all([task_id])[1].get(task_id)

    def locked_to_settle(self, task_id):
        """locked(), its promise knowing whether anything is registered on it: for task.fulfill, which settles it."""
        return self.locked_all([task_id], settling=task_id)[1].get(task_id)

    def locked_all(self, ids, settling=None):
        """Lock these promises (Promise.objects.lock_all's order), then read their tasks: ({id: promise}, {id: task}).

        Each task has its promise attached. The tasks are read after the locks are held (rows.lock_then_query),
        so the read may find the task of a promise created since the lock statement began, which it did not
        lock: that task is left out, as if it had been read with the promises. `settling`: the id of a locked
        promise the caller will settle, which then knows whether anything is registered on it (registered_on), and
        has its awaiters locked and their tasks read (Promise.awaiting_tasks), in the same round trip: a settlement
        that resumes its awaiters then sends every write with the commit (settle_all).
        """
        pks = sorted(set(ids))
        reads = [rows.reading(self.model, pks)]
        if settling is not None:
            lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
            reads += [registered_on(settling), *awaiters_of(settling, self.model, lock)]
        locked, (found, *registered) = rows.lock_then_query(Promise, pks, reads)
        promises, tasks = self._attached(locked, found)
        if settling in promises:
            settled = knowing_registrations(promises[settling], registered[0])
            awaiting, awaiting_found = registered[1:]
            settled.awaiting_tasks = self._attached(rows.instances(Promise, awaiting), awaiting_found)[1]
        return promises, tasks

    def locked_all_after(self, statements, ids):
        """rows.run_all(statements), then locked_all(ids), in one round trip on PostgreSQL: ([the rows of each
        statement], {id: promise}, {id: task}). The promises are locked once the statements' writes are done."""
        pks = sorted(set(ids))
        done, locked, (found,) = rows.run_all_then_lock(statements, Promise, pks, [rows.reading(self.model, pks)])
        return (done, *self._attached(locked, found))

    def _attached(self, locked, found):
        """({id: promise}, {id: task}) from locked promises and the task rows read after their locks, each task
        with its promise attached; a task whose promise was not locked (created since) is left out."""
        promises = {promise.pk: promise for promise in locked}
        tasks = [task for task in rows.instances(self.model, found) if task.pk in promises]
        for task in tasks:
            task.promise = promises[task.pk]
        return promises, {task.pk: task for task in tasks}

    def renew_leases(self, pid, refs, now):
        """T-05's writes as one statement: every task of `refs`, (id, version) pairs (with none, E1: every task),
        that `pid` holds, at that version, whose promise is live, has its lease renewed (Task.renew_lease, in SQL).

        The promises are locked first, in Promise.objects.lock_all's order (held is MATERIALIZED so that its ORDER BY
        and its locks run as written, not folded into the UPDATE's join), as for every task write; then the
        tasks are written. A task written by another transaction while this one waited for its promise's lock is
        checked again as it stands after that write (READ COMMITTED's recheck of an updated row). PostgreSQL: one
        statement, in autocommit, so the locks are held for that statement and its commit only.
        """
        from django.db import connection

        task, promise = rows.quote(self.model._meta.db_table), rows.quote(Promise._meta.db_table)
        lock = " FOR UPDATE OF p" if connection.features.has_select_for_update_of else ""
        if refs:  # each pair bound once, for both steps
            pairs = ", ".join(["(CAST(%s AS text), CAST(%s AS bigint))"] * len(refs))
            listed = f'refs ("id", "version") AS (VALUES {pairs}), '
            matched = ' AND (t."id", t."version") IN (SELECT "id", "version" FROM refs)'
            also = ' AND ("id", "version") IN (SELECT "id", "version" FROM refs)'
        else:
            listed, matched, also = "", "", ""
        rows.execute(
            f'WITH {listed}held AS MATERIALIZED (SELECT p."id" FROM {promise} p JOIN {task} t ON t."id" = p."id"'
            f' WHERE t."pid" = %s AND t."state" = %s AND p."state" = %s AND p."timeout_at" > %s{matched}'
            f' ORDER BY p."id" DESC{lock})'
            f' UPDATE {task} SET "timeout_kind" = %s,'
            ' "timeout_at" = CASE WHEN COALESCE("ttl", 0) > %s - %s THEN %s ELSE %s + COALESCE("ttl", 0) END'
            f' WHERE "id" IN (SELECT "id" FROM held) AND "pid" = %s AND "state" = %s{also}',
            [value for ref in refs for value in ref]
            + [pid, TaskState.ACQUIRED, PromiseState.PENDING, now]
            + [TimeoutKind.LEASE, I64_MAX, now, I64_MAX, now, pid, TaskState.ACQUIRED],
        )


class TaskManager(TaskRows, models.Manager.from_queryset(TaskQuerySet)):
    pass


def held_and_unregistered(task_id, version, now):
    """The query (sql, params) that finds a row when the caller holds the task (tasks.handlers.held: acquired, at
    this version, its promise live) and nothing is registered on its promise (live_and_unregistered): asked once the
    promise's lock is held, which guards the task too. task.fulfill's settlement in one round trip (settle_if)."""
    sql, params = live_and_unregistered(task_id, now)
    return sql + _held(), [*params, task_id, TaskState.ACQUIRED, version]


@cache
def _held():
    task = rows.quote(Task._meta.db_table)
    return f' AND EXISTS (SELECT 1 FROM {task} WHERE "id" = %s AND "state" = %s AND "version" = %s)'


MUTABLE_FIELDS = ("state", "version", "pid", "ttl", "resumes", "timeout_kind", "timeout_at")


class Task(models.Model):
    promise = models.OneToOneField(
        Promise, primary_key=True, on_delete=models.CASCADE, db_column="id", related_name="task"
    )
    state = models.CharField(max_length=9, choices=TaskState.choices, default=TaskState.PENDING)
    version = models.BigIntegerField(default=0)
    pid = models.TextField(null=True, blank=True)
    ttl = models.BigIntegerField(null=True, blank=True)
    # Ids of the promises whose settlement resumed this task since it was last acquired.
    resumes = models.JSONField(default=list)
    # The spec's taskTimeouts entry; every transition leaves a task with at most one.
    timeout_kind = models.SmallIntegerField(choices=TimeoutKind.choices, null=True, blank=True)
    timeout_at = models.BigIntegerField(null=True, blank=True)

    objects = TaskManager()

    class Meta:
        indexes = [
            # In the sweep's order (timeouts.due: deadline, then id), so that a batch reads no more than itself however
            # many tasks share a deadline; and the earliest deadline of each kind is its first entry (next_due).
            models.Index(
                fields=["timeout_kind", "timeout_at", "promise"],
                name="task_timeouts",
                condition=Q(timeout_kind__isnull=False),
            ),
            models.Index(fields=["pid"], name="task_pid", condition=Q(pid__isnull=False)),
        ]

    def __str__(self):
        return self.id

    @property
    def id(self):
        return self.promise_id

    def insert(self):
        rows.insert(self)

    def write(self, *fields):
        """Store the given fields (all of them by default)."""
        rows.update(self, *(fields or MUTABLE_FIELDS))

    def writing(self, *fields):
        """write() as a Statement, for rows.run_all with other writes."""
        return rows.setting(self, *(fields or MUTABLE_FIELDS), pks=[self.pk])

    # The task's state changes. Each sets the state with the lease and the one timeout that state has
    # (pending: its retry; acquired: its lease; suspended, halted, fulfilled: none), so every transition
    # keeps "a task has at most one timeout, the one its state calls for". Unsaved: callers write().

    def to_pending(self, retry_at):
        """Pending, offered to its target again at `retry_at` (its retry timeout); no lease; the version is kept."""
        self.state, self.pid, self.ttl = TaskState.PENDING, None, None
        self.timeout_kind, self.timeout_at = TimeoutKind.RETRY, retry_at

    def to_acquired(self, pid, ttl, now):
        """Acquired by pid for ttl ms, with the next version as its fencing token; resumes cleared."""
        self.state, self.version, self.pid, self.ttl, self.resumes = TaskState.ACQUIRED, self.version + 1, pid, ttl, []
        self.renew_lease(now)

    def renew_lease(self, now):
        """An acquired task's lease runs for another ttl from `now` (its lease timeout). task.heartbeat renews
        leases by statement (TaskQuerySet.renew_leases), to the same values."""
        self.timeout_kind, self.timeout_at = TimeoutKind.LEASE, later(now, self.ttl or 0)

    def to_suspended(self):
        """Suspended, waiting to be resumed: no lease, no timeout."""
        self._waiting(TaskState.SUSPENDED)

    def to_halted(self):
        """Halted, not dispatched until task.continue: no lease, no timeout."""
        self._waiting(TaskState.HALTED)

    def to_fulfilled(self):
        """Fulfilled with its promise: no lease, no timeout, no resumes (tasks.engine.fulfilling, by statement)."""
        self._waiting(TaskState.FULFILLED)
        self.resumes = []

    def _waiting(self, state):
        self.state, self.pid, self.ttl, self.timeout_kind, self.timeout_at = state, None, None, None, None

    def projected(self, promise, now):
        """The task as readers see it: once its promise is settled or expired, the task reads as fulfilled."""
        if promise.is_live(now):
            return self
        shown = copy.copy(self)
        shown.to_fulfilled()
        return shown

    def to_record(self):
        record = {"id": self.id, "state": self.state, "version": self.version, "resumes": len(self.resumes)}
        if self.ttl is not None:
            record["ttl"] = self.ttl
        if self.pid is not None:
            record["pid"] = self.pid
        return record
