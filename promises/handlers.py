"""promise.* handlers (spec P-01 … P-06): each takes the decoded request and `now`, and returns a Reply."""

from floor.protocol import PROMISE_NOT_FOUND, Reply, ok, page, searched, tagged
from floor.transactions import Unavailable, run_again_on_a_new_connection
from promises.engine import create, settle, settle_at_once
from promises.models import Callback, Listener, Promise, PromiseState


def promise_get(req, now):
    """P-01."""
    promise = Promise.objects.find(req["id"])
    if promise is None:
        return PROMISE_NOT_FOUND
    return ok(promise=promise.projected(now).to_record())


def promise_create(req, now, found=None):
    """P-02: an existing promise is returned as it reads now; a new one is pending, or born settled if expired.

    `found`: the promise with this id, when the caller has already read it under its lock (task.fence).
    """
    existing = found
    if existing is None:
        promise, _, existing = create(req["id"], req["param"], req["tags"], req["timeout_at"], now)
    if existing is not None:
        projected = existing.projected(now)
        if projected.state != PromiseState.PENDING and existing.created_at == now and run_again_on_a_new_connection():
            # Its first run's insert may have committed before the connection was lost, and the promise been settled
            # since: answering it settled would make this create act twice, once creating and once reading. The
            # caller retries, and reads it then (found by the linearizability checker under dropped connections).
            raise Unavailable("promise.create: connection lost while its write may have committed")
        return ok(promise=projected.to_record())
    return ok(promise=promise.to_record())


def promise_settle(req, now, locked=None):
    """P-03: settle a live promise; a settled or expired one is returned as it reads now, unchanged.

    `locked`: {id: promise} as the caller has read them under their locks, this one knowing its registrations
    (task.fence, TaskQuerySet.locked_all's `settling`).
    """
    promise = Promise.objects.locked_to_settle(req["id"]) if locked is None else locked.get(req["id"])
    if promise is None:
        return PROMISE_NOT_FOUND
    if promise.is_live(now):
        settle(promise, req["state"], req["value"], now, now)
    return ok(promise=promise.projected(now).to_record())


def promise_settle_at_once(req, now):
    """P-03 in one round trip without a transaction (PostgreSQL), unless the promise is live with something
    registered on it: None then (and off PostgreSQL), and promise_settle runs, in a transaction."""
    found = settle_at_once(req["id"], req["state"], req["value"], now)
    if found is None:
        return None
    if not found:
        return PROMISE_NOT_FOUND
    (promise,) = found
    if promise.is_live(now):  # not settled there: it has registrations, which settle_all takes (or a later creation)
        return None
    return ok(promise=promise.projected(now).to_record())


def promise_register_callback(req, now):
    """P-04: the awaiter resumes when the awaited settles; registered only while both are live."""
    promises = Promise.objects.lock_all([req["awaited"], req["awaiter"]])
    awaited, awaiter = promises.get(req["awaited"]), promises.get(req["awaiter"])
    if awaited is None:
        return PROMISE_NOT_FOUND
    if awaiter is None:
        return Reply(422, "Awaiter promise not found")
    if awaiter.target is None:
        return Reply(422, "Awaiter promise has no resonate:target, so it cannot be resumed")
    if awaited.is_live(now) and awaiter.is_live(now):
        Callback.register(awaited.id, awaiter.id)
    return ok(promise=awaited.projected(now).to_record())


def promise_register_listener(req, now):
    """P-05: the address gets an unblock when the promise settles; registered only while it is live."""
    awaited = Promise.objects.locked(req["awaited"])
    if awaited is None:
        return PROMISE_NOT_FOUND
    if awaited.is_live(now):
        Listener.register(awaited.id, req["address"])
    return ok(promise=awaited.projected(now).to_record())


def promise_search(req, now):
    """P-06 is a stub in the spec; decision D5: filter by projected state and tags, page by id."""
    promises = Promise.objects.all()
    if "state" in req:
        promises = promises.with_projected_state(PromiseState(req["state"]), now)
    promises = tagged(promises, "tags", req["tags"])
    rows, cursor = page(promises, req.get("cursor"), req["limit"])
    return searched("promises", [p.projected(now).to_record() for p in rows], cursor)
