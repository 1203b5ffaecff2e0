"""Promise machinery shared by handlers and timeouts: settlement and the promise timeout transition."""

from outbox.messages import set_unblock
from promises.models import Callback, Listener, Promise, timeout_state
from tasks.engine import enqueue_resume, fulfil


def settle(promise, state, value, settled_at, now):
    """Settle a pending promise and propagate it: the one block behind promise.settle, task.fulfill,
    fenced settles and on_promise_timeout.

    Writes the settlement and fulfils the promise's task; scrubs the promise's own registrations as an
    awaiter (it can never be resumed again); sends unblock to its listeners; resumes its awaiters.
    The caller holds the promise's row lock.
    """
    listeners = Listener.take_addresses(promise.id)
    awaiters = Callback.take_awaiters(promise.id)
    promise.state, promise.value, promise.settled_at = state, value, settled_at
    promise.timeout_armed = False
    promise.write("state", "value", "settled_at", "timeout_armed")
    fulfil(promise.id)
    Callback.scrub(promise.id)
    record = promise.to_record()
    for address in listeners:
        set_unblock(address, record, now)
    for awaiter_id in sorted(awaiters, reverse=True):  # the lock order of Promise.objects.lock_all
        enqueue_resume(promise.id, awaiter_id, now)


def on_promise_timeout(promise_id, now):
    """An armed promise timeout fired: the promise settles as timed out (timers resolve) at its deadline."""
    promise = Promise.objects.locked(promise_id)
    if promise is None or not promise.is_pending:
        return
    settle(promise, timeout_state(promise.tags), promise.value, promise.timeout_at, now)
