"""Durable promises, the callbacks that wake their awaiters, and the listeners they notify."""

import copy
from functools import cache

from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.backends.ddl_references import Statement
from django.db.models import Q

from floor import rows
from floor.lineage import FUNCTION_SQL
from floor.protocol import BRANCH, EXTERNAL, TARGET, TIMER, IdField


class PromiseState(models.TextChoices):
    PENDING = "pending"
    RESOLVED = "resolved"
    REJECTED = "rejected"
    REJECTED_CANCELED = "rejected_canceled"
    REJECTED_TIMEDOUT = "rejected_timedout"


def is_timer(tags):
    return tags.get(TIMER) == "true"


def is_external(tags):
    """External promises get a durable timeout (spec `external`, plus extension E2's resonate:external)."""
    return TARGET in tags or is_timer(tags) or tags.get(EXTERNAL) == "true"


def timeout_state(tags):
    """The state a promise reaches when its deadline passes: timers resolve, everything else times out."""
    return PromiseState.RESOLVED if is_timer(tags) else PromiseState.REJECTED_TIMEDOUT


class PromiseQuerySet(models.QuerySet):
    def running(self, function):
        """Promises whose param names this function, as the SDKs encode it (floor/lineage.py). Not indexed: a scan
        of the rows the rest of the query leaves, a function call per row."""
        name = models.Func(models.F("param"), function=FUNCTION_SQL, output_field=models.TextField())
        return self.alias(function_name=name).filter(function_name=function)

    def with_projected_state(self, state, now):
        """Promises whose projected state at `now` is `state` (search filters on what readers see)."""
        live = Q(state=PromiseState.PENDING, timeout_at__gt=now)
        expired = Q(state=PromiseState.PENDING, timeout_at__lte=now)
        if state == PromiseState.PENDING:
            return self.filter(live)
        if state == PromiseState.RESOLVED:
            return self.filter(Q(state=state) | (expired & Q(timer=True)))
        if state == PromiseState.REJECTED_TIMEDOUT:
            return self.filter(Q(state=state) | (expired & Q(timer=False)))
        return self.filter(state=state)


class PromiseRows:
    """The protocol's reads and locks of promise rows by id (floor/rows.py), on the manager itself: a QuerySet's
    method called on the manager first builds a QuerySet (Manager.from_queryset), 1.4 µs of CPU a call here, which
    these methods never use."""

    def find(self, promise_id):
        """The promise with this id, or None."""
        return rows.fetch(self.model, promise_id)

    def locked(self, promise_id):
        """The promise, row-locked until the transaction ends (None if it does not exist).

        The promise row is the lock for everything keyed by its id: every writer of a promise, of its
        task or of its registrations locks the promise row first.
        """
        return rows.fetch(self.model, promise_id, lock=True)

    def locked_to_settle(self, promise_id):
        """locked(), knowing whether the promise has anything registered on it (Promise.unregistered)."""
        locked, (registered,) = rows.lock_then_query(self.model, [promise_id], [registered_on(promise_id)])
        if not locked:
            return None
        return knowing_registrations(locked[0], registered)

    def lock_all(self, ids):
        """Lock several promises at once, in descending id order; returns {id: promise} for those that exist.

        One order for everyone avoids deadlocks. Descending puts children ("wf.1") before their
        parents ("wf"), the order in which settlement locks an awaited promise and then its awaiter.
        """
        return {p.id: p for p in rows.fetch_all(self.model, ids, lock=True, descending=True)}


class PromiseManager(PromiseRows, models.Manager.from_queryset(PromiseQuerySet)):
    pass


class PostgresGinIndex(GinIndex):
    """A GIN index on PostgreSQL, and none elsewhere: SQLite would build a plain index on the column instead, which
    its tag search (floor.protocol.tagged reads json_each) never uses and every insert pays for. Elsewhere the
    statements are empty, not None: the schema editor runs whatever they are, also when it rebuilds the table."""

    def create_sql(self, model, schema_editor, using="", **kwargs):
        if schema_editor.connection.vendor != "postgresql":
            return Statement("")
        return super().create_sql(model, schema_editor, using, **kwargs)

    def remove_sql(self, model, schema_editor, **kwargs):
        if schema_editor.connection.vendor != "postgresql":
            return Statement("")
        return super().remove_sql(model, schema_editor, **kwargs)


class Promise(models.Model):
    # Not stored: True when the promise was read under its lock with nothing registered on it (registered_on).
    unregistered = False
    # Not stored: the ids of the promises awaiting it, in lock order, when read under its lock (registered_on).
    awaiters = None
    # Not stored: whether it has listeners, when read under its lock (registered_on).
    listened = True
    # Not stored: {awaiter id: its task, with its promise attached}, its awaiters locked and their tasks read in
    # the round trip of its own lock (TaskQuerySet.locked_all); settle_all then sends every write with the commit.
    awaiting_tasks = None

    id = IdField(primary_key=True)
    state = models.CharField(max_length=17, choices=PromiseState.choices, default=PromiseState.PENDING)
    param = models.JSONField(default=dict)
    value = models.JSONField(default=dict)
    tags = models.JSONField(default=dict)
    timeout_at = models.BigIntegerField()
    created_at = models.BigIntegerField()
    settled_at = models.BigIntegerField(null=True, blank=True)
    # The spec's promiseTimeouts entry: armed for external promises, fires at timeout_at.
    timeout_armed = models.BooleanField(default=False)
    # Copies of two tags, as columns so search and preload can use an index.
    timer = models.BooleanField(default=False)
    branch = models.TextField(null=True, blank=True)

    objects = PromiseManager()

    class Meta:
        indexes = [
            models.Index(fields=["timeout_at", "id"], name="promise_timeout_due", condition=Q(timeout_armed=True)),
            models.Index(fields=["branch", "id"], name="promise_branch", condition=Q(branch__isnull=False)),
            models.Index(fields=["state", "timeout_at"], name="promise_state"),
            models.Index(fields=["created_at", "id"], name="promise_created"),  # the console lists newest first
            # Tag search is containment (tags @> {...}, floor.protocol.tagged), the one operator jsonb_path_ops
            # serves, with a smaller index than jsonb_ops. fastupdate off: no pending list for every search to read
            # and for an unlucky insert to merge (bench/README.md: Tag search).
            PostgresGinIndex(fields=["tags"], name="promise_tags", opclasses=["jsonb_path_ops"], fastupdate=False),
        ]

    def __str__(self):
        return self.id

    @classmethod
    def build(cls, id, param, tags, timeout_at, **fields):
        """An unsaved promise with the tag-derived columns filled in."""
        return rows.new(
            cls,
            id=id,
            param=param,
            tags=tags,
            timeout_at=timeout_at,
            timer=is_timer(tags),
            branch=tags.get(BRANCH),
            **fields,
        )

    @classmethod
    def build_expired(cls, id, param, tags, timeout_at):
        """A promise created at or after its deadline (P-02, T-02): born settled as its timeout settles it."""
        state = timeout_state(tags)
        return cls.build(id, param, tags, timeout_at, state=state, created_at=timeout_at, settled_at=timeout_at)

    def insert(self):
        rows.insert(self)

    def write(self, *fields):
        rows.update(self, *fields)

    @property
    def target(self):
        return self.tags.get(TARGET)

    @property
    def is_pending(self):
        return self.state == PromiseState.PENDING

    def is_live(self, now):
        """Pending and not yet past its deadline: the only state in which a promise can change."""
        return self.state == PromiseState.PENDING and self.timeout_at > now

    def projected(self, now):
        """The promise as readers see it at `now`: a pending promise past its deadline reads as settled.

        Nothing is written; only on_promise_timeout writes the settlement (the spec's projection).
        """
        if self.state != PromiseState.PENDING or self.timeout_at > now:
            return self
        shown = copy.copy(self)
        shown.state = timeout_state(self.tags)
        shown.settled_at = self.timeout_at
        return shown

    def to_record(self):
        record = {
            "id": self.id,
            "state": self.state,
            "param": self.param,
            "value": self.value,
            "tags": self.tags,
            "timeoutAt": self.timeout_at,
            "createdAt": self.created_at,
        }
        if self.settled_at is not None:
            record["settledAt"] = self.settled_at
        return record


class Callback(models.Model):
    """An awaiter registered on an awaited promise: when the awaited settles, the awaiter resumes."""

    # Indexes: callback_unique serves lookups by awaited (its first column), callback_awaiter the scrub's by awaiter.
    # No index of Django's own per foreign key: one would repeat callback_unique, and its text_pattern_ops twin
    # serves LIKE, which nothing runs here; each costs a write per registration.
    awaited = models.ForeignKey(Promise, on_delete=models.CASCADE, related_name="callbacks", db_index=False)
    awaiter = models.ForeignKey(Promise, on_delete=models.CASCADE, related_name="awaiting", db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["awaited", "awaiter"], name="callback_unique")]
        indexes = [models.Index(fields=["awaiter"], name="callback_awaiter")]

    def __str__(self):
        return f"{self.awaiter_id} awaits {self.awaited_id}"

    @classmethod
    def register(cls, awaited_id, awaiter_id):
        """The last write of promise.register_callback: sent with the commit (rows.at_commit)."""
        rows.at_commit([cls.registering([awaited_id], awaiter_id)])

    @classmethod
    def registering(cls, awaited_ids, awaiter_id):
        """register() for several awaited promises, as one Statement for rows.run_all."""
        callbacks = [cls(awaited_id=awaited_id, awaiter_id=awaiter_id) for awaited_id in sorted(set(awaited_ids))]
        return rows.inserting(callbacks, on_conflict="nothing")

    @classmethod
    def scrubbing(cls, settled_ids):
        """The settlement scrub: settled promises are removed as awaiters from every promise they waited on.

        Callbacks among the settled promises themselves are left to taking them as awaited (take_registrations):
        the two steps never touch the same row.
        """
        return rows.Statement(cls._scrubbing(len(settled_ids)), [*settled_ids, *settled_ids])

    @classmethod
    @cache
    def _scrubbing(cls, count):
        table, where = rows.quote(cls._meta.db_table), rows.placeholders(range(count))
        return f'DELETE FROM {table} WHERE "awaiter_id" IN ({where}) AND "awaited_id" NOT IN ({where})'

    @classmethod
    def among(cls, ids):
        """Whether any of these promises awaits another of them."""
        return bool(
            rows.query(
                f'SELECT 1 FROM {rows.quote(cls._meta.db_table)} WHERE "awaited_id" IN ({rows.placeholders(ids)})'
                f' AND "awaiter_id" IN ({rows.placeholders(ids)}) LIMIT 1',
                [*ids, *ids],
            )
        )


class Listener(models.Model):
    """An address that receives an unblock message when the promise settles."""

    # listener_unique serves lookups by promise (its first column): no index of Django's own for the foreign key.
    promise = models.ForeignKey(Promise, on_delete=models.CASCADE, related_name="listeners", db_index=False)
    address = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["promise", "address"], name="listener_unique")]

    def __str__(self):
        return f"{self.address} listens to {self.promise_id}"

    @classmethod
    def register(cls, promise_id, address):
        """The last write of promise.register_listener: sent with the commit (rows.at_commit)."""
        rows.at_commit([rows.inserting([cls(promise_id=promise_id, address=address)], on_conflict="nothing")])


def taking_registrations(promise_ids, known=False):
    """What settling these promises consumes, removed: their listeners and their callbacks (as awaited). `known`:
    what they are was read under the promises' locks already, so nothing is returned (the writes can go with the
    commit)."""
    return [
        rows.taking(Listener, "promise_id", promise_ids, *([] if known else ["promise_id", "address"])),
        rows.taking(Callback, "awaited_id", promise_ids, *([] if known else ["id", "awaited_id", "awaiter_id"])),
    ]


def registered_on(promise_id):
    """The read (sql, params) of what is registered on the promise: a row holding NULL if it has listeners, and
    a row per awaiter holding the awaiter's id.

    Asked once the promise's lock is held, in the same round trip (rows.lock_then_query): registrations are
    written and taken under that lock, so the answer holds until the transaction ends. Asked in the locking
    statement itself, it would come from the snapshot taken before the lock was waited for.
    """
    return _registered_on(), [promise_id, promise_id]


@cache
def _registered_on():
    listener, callback = (rows.quote(m._meta.db_table) for m in (Listener, Callback))
    return (
        f'SELECT NULL WHERE EXISTS (SELECT 1 FROM {listener} WHERE "promise_id" = %s)'
        f' UNION ALL SELECT "awaiter_id" FROM {callback} WHERE "awaited_id" = %s'
    )


def live_and_unregistered(promise_id, now):
    """The query (sql, params) that finds a row when the promise is live at `now` (Promise.is_live), created no later
    than `now`, and has nothing registered on it (registered_on finds nothing): asked once its lock is held, as
    registered_on is. A promise created after `now` (by a request that arrived later but committed first) is settled
    by engine.settle, at its creation's time."""
    return _live_and_unregistered(), [promise_id, PromiseState.PENDING, now, now, promise_id, promise_id]


@cache
def _live_and_unregistered():
    promise, listener, callback = (rows.quote(m._meta.db_table) for m in (Promise, Listener, Callback))
    return (
        f'SELECT 1 FROM {promise} WHERE "id" = %s AND "state" = %s AND "timeout_at" > %s AND "created_at" <= %s'
        f' AND NOT EXISTS (SELECT 1 FROM {listener} WHERE "promise_id" = %s)'
        f' AND NOT EXISTS (SELECT 1 FROM {callback} WHERE "awaited_id" = %s)'
    )


def knowing_registrations(promise, registered):
    """The promise, knowing what registered_on found: unregistered when nothing (settling it sends its writes with
    the commit), whether it has listeners, and its awaiters (settling it locks them with its writes); see
    settle_all."""
    promise.unregistered = not registered
    promise.listened = any(id is None for (id,) in registered)
    promise.awaiters = sorted((id for (id,) in registered if id is not None), reverse=True)
    return promise


def awaiters_of(promise_id, task_model, lock):
    """The reads (sql, params) that lock the promises awaiting this one (lock_all's order; `lock`: the locking
    clause, or "" where there is none) and then read their tasks (rows of `task_model`). Asked once this promise's
    lock is held, in the same round trip (rows.lock_then_query): its callbacks cannot change until the
    transaction ends, and the tasks are read once their promises' locks are held. The promise itself, were it
    among its own awaiters, is left out: settling it fulfils its task, which then has nothing to resume."""
    promises, tasks = _awaiters_of(task_model, lock)
    return [(promises, [promise_id, promise_id]), (tasks, [promise_id, promise_id])]


@cache
def _awaiters_of(task_model, lock):
    awaiting = (
        f'SELECT "awaiter_id" FROM {rows.quote(Callback._meta.db_table)} WHERE "awaited_id" = %s AND "awaiter_id" <> %s'
    )
    key = rows.quote(Promise._meta.pk.column)
    return (
        f"SELECT {rows.columns(Promise)} FROM {rows.quote(Promise._meta.db_table)} WHERE {key} IN ({awaiting})"
        f" ORDER BY {key} DESC{lock}",
        f'SELECT {rows.columns(task_model)} FROM {rows.quote(task_model._meta.db_table)} WHERE "id" IN ({awaiting})',
    )


def registrations(listened, awaited):
    """The rows taken by taking_registrations as ({promise id: [addresses]}, {awaited id: [awaiter ids, in
    registration order]})."""
    addresses, awaiters = {}, {}
    for row in sorted(listened, key=lambda row: (row["promise_id"], row["address"])):
        addresses.setdefault(row["promise_id"], []).append(row["address"])
    for row in sorted(awaited, key=lambda row: row["id"]):
        awaiters.setdefault(row["awaited_id"], []).append(row["awaiter_id"])
    return addresses, awaiters
