"""Promise machinery shared by handlers and timeouts: settlement and the promise timeout transition."""

from outbox.messages import set_unblocks
from promises import rows
from promises.models import Callback, Listener, Promise, timeout_state
from tasks.engine import enqueue_resume, fulfil


def settle(promise, state, value, settled_at, now):
    """Settle one pending promise (locked by the caller) and propagate it; see settle_all."""
    promise.state, promise.value, promise.settled_at = state, value, settled_at
    settle_all([promise], now)


def settle_all(promises, now):
    """The settlement block behind promise.settle, task.fulfill, fenced settles and on_promise_timeout.

    The promises are locked by the caller, pending in storage, and carry their new state, value and
    settledAt. Writes the settlements and fulfils their tasks; scrubs them as awaiters (a settled
    promise can never be resumed again); sends unblock to their listeners; resumes their awaiters,
    promise by promise in the given order. Several promises are settled with one statement per step;
    the caller makes sure none of them awaits another (Callback.among), or settles them one by one.
    """
    ids = [p.id for p in promises]
    listeners = Listener.take_addresses(ids)
    awaiters = Callback.take_awaiters(ids)
    for promise in promises:
        promise.timeout_armed = False
    rows.update_all(promises, "state", "value", "settled_at", "timeout_armed")
    fulfil(ids)
    Callback.scrub(ids)
    records = {p.id: p.to_record() for p in promises}
    set_unblocks([(address, records[id]) for id in ids for address in listeners.get(id, [])], now)
    for id in ids:
        for awaiter_id in sorted(awaiters.get(id, []), reverse=True):  # the lock order of Promise.objects.lock_all
            enqueue_resume(id, awaiter_id, now)


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
