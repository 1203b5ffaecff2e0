"""Promise machinery shared by handlers and timeouts: creation, settlement and the promise timeout transition."""

from typing import NamedTuple

from floor import rows
from outbox.dispatch import announce
from outbox.messages import set_unblocks
from promises.models import (
    Callback,
    Promise,
    is_external,
    live_and_unregistered,
    registrations,
    taking_registrations,
    timeout_state,
)
from tasks.engine import enqueue_resume, fulfilling, new_task
from tasks.models import Task


class Creation(NamedTuple):
    promise: object  # the promise as created (unsaved when `existing` is not None)
    task: object  # its task, or None when it has none
    existing: object  # the promise that already had this id (nothing was written), or None


def create(id, param, tags, timeout_at, now, holder=None):
    """Creation, for promise.create (P-02), task.create (T-02, with `holder` = (pid, ttl)) and schedules.

    The promise is pending, or, created at or past its deadline, born settled as its timeout would settle it.
    It has a task when it has a resonate:target or a holder (see new_task). Everything is stored at once,
    unless a promise with this id exists: then nothing is written, and `existing` is that promise.
    """
    if timeout_at > now:
        armed = holder is not None or is_external(tags)
        promise = Promise.build(id, param, tags, timeout_at, created_at=now, timeout_armed=armed)
    else:
        promise = Promise.build_expired(id, param, tags, timeout_at)
    task, messages = new_task(promise, now, holder) if holder is not None or promise.target is not None else (None, [])
    existing = rows.insert_unless_exists(promise, [row for row in (task, *messages) if row is not None])
    if existing is None and messages:
        announce(*messages)
    return Creation(promise, task, existing)


def settle(promise, state, value, settled_at, now):
    """Settle one pending promise (locked by the caller) and propagate it; see settle_all.

    Never at a time before the promise's creation: a request reads the clock when it arrives, and may then wait for
    the lock of a promise whose create, arriving a moment later, committed first. It acts after that create, so at
    its time at the earliest (well_formed_promise_created_at_lte_settled_at).
    """
    promise.state, promise.value, promise.settled_at = state, value, max(settled_at, promise.created_at)
    settle_all([promise], now)


def settle_all(promises, now):
    """The settlement block behind promise.settle, task.fulfill, fenced settles and on_promise_timeout.

    The promises are locked by the caller, pending in storage, and carry their new state, value and
    settledAt. Writes the settlements and fulfils their tasks; scrubs them as awaiters (a settled
    promise can never be resumed again); sends unblock to their listeners; resumes their awaiters,
    promise by promise in the given order. Several promises are settled with one statement per step;
    the caller makes sure none of them awaits another (Callback.among), or settles them one by one.
    Promises read under their locks with nothing registered on them (Promise.unregistered) have no
    listeners to take or awaiters to resume: their first three steps are sent with the commit. One read
    with its awaiters locked and their tasks read already (Promise.awaiting_tasks: task.fulfill's and a fenced
    settle's) and no listeners sends everything with the commit too. One read with its awaiters known
    (Promise.awaiters) has them locked, and their tasks read, in the round trip of its settlement.
    """
    ids = [p.id for p in promises]
    settling = settlement(promises)
    if all(promise.unregistered for promise in promises):
        rows.at_commit(settling)  # nothing to take and nothing to follow up: the writes go with the commit
        return
    if len(promises) == 1 and promises[0].awaiting_tasks is not None and not promises[0].listened:
        # Its awaiters locked and their tasks read with its own lock: every write goes with the commit.
        (promise,) = promises
        rows.at_commit([*settling, *taking_registrations(ids, known=True)])
        for awaiter_id in promise.awaiters:  # the lock order of Promise.objects.lock_all
            enqueue_resume(promise.id, awaiter_id, now, locked=promise.awaiting_tasks)  # itself not among them
        return
    statements = [*settling, *taking_registrations(ids)]  # one statement on PostgreSQL
    if len(promises) == 1 and promises[0].awaiters:
        (*_, listened, awaited), _, tasks = Task.objects.locked_all_after(statements, promises[0].awaiters)
    else:
        (*_, listened, awaited), tasks = rows.run_all(statements), None
    listeners, awaiters = registrations(listened, awaited)
    records = {p.id: p.to_record() for p in promises}
    set_unblocks([(address, records[id]) for id in ids for address in listeners.get(id, [])], now)
    for id in ids:
        for awaiter_id in sorted(awaiters.get(id, []), reverse=True):  # the lock order of Promise.objects.lock_all
            enqueue_resume(id, awaiter_id, now, locked=tasks)


SETTLED_FIELDS = ("state", "value", "settled_at", "timeout_armed")  # what a settlement writes of a promise


def settlement(promises):
    """A settlement's first three steps, as statements: the promises (carrying their new state, value and settledAt)
    written with their timeouts disarmed, their tasks fulfilled, and the scrub (settle_all)."""
    ids = [p.id for p in promises]
    for promise in promises:
        promise.timeout_armed = False
    return [rows.updating(promises, *SETTLED_FIELDS), fulfilling(ids), Callback.scrubbing(ids)]


def settle_at_once(promise_id, state, value, now):
    """P-03 in one round trip without a transaction (PostgreSQL), for a live promise with nothing registered on
    it: [the promise as it stands once the string has run], [] when it does not exist, None elsewhere than on
    PostgreSQL.

    The promise is locked, and the settlement's writes (settlement) made only if it is live with nothing
    registered, a condition asked once the lock is held (live_and_unregistered; rows.lock_then_write). A promise
    still live afterwards has registrations and was not written: its listeners are taken and its awaiters resumed
    by settle_all, in a transaction (the caller's next step). A promise created after the lock looked for it is
    answered as absent: it was when the string began.
    """
    settled = settle_if(promise_id, state, value, now, live_and_unregistered(promise_id, now))
    return None if settled is None else settled[0]


def settle_if(promise_id, state, value, now, provided):
    """Settle the promise in one round trip without a transaction (PostgreSQL) if `provided`, a query (sql, params)
    that implies live_and_unregistered, finds a row once the promise's lock is held: ([the promise as it stands once
    the string has run] or [] when it does not exist, whether it was settled there); None elsewhere than on
    PostgreSQL. settle_at_once's, and task.fulfill's with the task held (tasks.models.held_and_unregistered)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    settling = rows.new(Promise, id=promise_id, state=state, value=value, settled_at=now)
    locked, written = rows.lock_then_write(Promise, promise_id, provided, settlement([settling]))
    if written:
        for name in SETTLED_FIELDS:  # as written
            setattr(locked[0], name, getattr(settling, name))
    return locked, written


def on_promise_timeout(promise_ids, now):
    """Armed promise timeouts fired (02-timeouts.lean), for a batch of promises in firing order: each
    pending one settles as timed out (a timer resolves) at its deadline.

    Settling them together is the same as one by one unless one awaits another in the batch (an
    awaiter settled later would first be resumed); then they settle one by one, in order.
    """
    locked = Promise.objects.lock_all(promise_ids)
    due = [locked[id] for id in promise_ids if id in locked and locked[id].is_pending]
    for promise in due:
        promise.state, promise.settled_at = timeout_state(promise.tags), promise.timeout_at
    if len(due) > 1 and Callback.among([p.id for p in due]):
        for promise in due:
            settle_all([promise], now)
    elif due:
        settle_all(due, now)
