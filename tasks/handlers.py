"""task.* handlers (spec T-01 … T-11): each takes the decoded request and `now`, and returns a Reply."""

from floor.protocol import PROTOCOL_VERSION, TASK_NOT_FOUND, Reply, ok, page, searched
from promises.engine import create, settle, settle_if
from promises.handlers import promise_create, promise_settle
from promises.models import Promise
from tasks.engine import (
    acquire,
    acquire_at_once,
    preload,
    read_for_fence,
    records,
    return_to_pending,
    suspend,
)
from tasks.models import Task, TaskState, held_and_unregistered

NOT_PENDING = Reply(409, "Task is not pending")
NOT_ACQUIRED = Reply(409, "Task is not acquired")
NOT_LIVE = Reply(409, "Task's promise is already settled or timed out")
STALE_VERSION = Reply(409, "Task version does not match (the task was acquired again)")


def held(task, req, now):
    """The 409 a task operation gets unless the caller holds the task: acquired, live, same version."""
    if task.state != TaskState.ACQUIRED:
        return NOT_ACQUIRED
    if not task.promise.is_live(now):
        return NOT_LIVE
    if task.version != req["version"]:
        return STALE_VERSION
    return None


def task_get(req, now):
    """T-01: the task as it reads now (fulfilled once its promise is settled or expired)."""
    task = Task.objects.with_promise(req["id"])
    if task is None:
        return TASK_NOT_FOUND
    return ok(task=task.projected(task.promise, now).to_record())


def task_create_new(req, now):
    """T-02 for a promise that does not exist: created with its task acquired by the caller, by create()'s one
    statement, which needs no transaction (task.create's first step). None when the promise exists: task_create
    then locks it, in a transaction."""
    created = _created(req, now)
    return None if created.existing is not None else _created_reply(created, now)


def task_create(req, now):
    """T-02: create the promise with its task acquired by the caller, or acquire the existing pending task."""
    action = req["action"]["data"]
    promise = Promise.objects.locked(action["id"])
    if promise is None:  # gone since task_create_new found it (debug.reset), or on a path without that step
        created = _created(req, now)
        if created.existing is None:
            return _created_reply(created, now)
        promise = Promise.objects.locked(action["id"])  # created by another request meanwhile
    if promise.target is None:
        return Reply(422, "Promise exists without a resonate:target, so it has no task")
    task = Task.objects.find(promise.id)
    if task is None:
        return Reply(409, "Promise exists without a task")
    if task.state == TaskState.FULFILLED:
        return ok(task=task.to_record(), promise=promise.to_record(), preload=[])
    if task.state != TaskState.PENDING:
        return Reply(409, f"Task already exists and is {task.state}")
    task.promise = promise
    shared = acquire(task, req["pid"], req["ttl"], now)
    return ok(task=task.to_record(), promise=promise.to_record(), preload=shared)


def _created(req, now):
    action = req["action"]["data"]
    holder = (req["pid"], req["ttl"])
    return create(action["id"], action["param"], action["tags"], action["timeout_at"], now, holder)


def _created_reply(created, now):
    task, promise = created.task, created.promise
    shared = preload(promise, now) if task.state == TaskState.ACQUIRED else []  # none if born settled
    return ok(task=task.to_record(), promise=promise.to_record(), preload=shared)


def task_acquire_at_once(req, now):
    """T-03 in one round trip, without a transaction, when the task is acquired (task.acquire's first step);
    None otherwise: task_acquire then runs, in a transaction, and says why not."""
    acquired = acquire_at_once(req["id"], req["version"], req["pid"], req["ttl"], now)
    if acquired is None:
        return None
    task, branch = acquired
    return ok(task=task.to_record(), promise=task.promise.to_record(), preload=records(branch, now))


def task_acquire(req, now):
    """T-03: a pending task whose promise is live is acquired at the version its execute carried."""
    task = Task.objects.locked(req["id"])
    if task is None:
        return TASK_NOT_FOUND
    if task.state != TaskState.PENDING:
        return NOT_PENDING
    if not task.promise.is_live(now):
        return NOT_LIVE
    if task.version != req["version"]:
        return STALE_VERSION
    shared = acquire(task, req["pid"], req["ttl"], now)
    return ok(task=task.to_record(), promise=task.promise.to_record(), preload=shared)


def task_fence(req, now):
    """T-04: run a promise.create or promise.settle only while the caller holds the task."""
    action = req["action"]
    settling = action["data"]["id"] if action["kind"] == "promise.settle" else None
    promises, tasks = Task.objects.locked_all([action["data"]["id"], req["id"]], settling=settling)
    task = tasks.get(req["id"])
    if task is None:
        return TASK_NOT_FOUND
    refused = held(task, req, now)
    if refused:
        return refused
    if action["kind"] == "promise.create":
        status, data = promise_create(action["data"], now, found=promises.get(action["data"]["id"]))
    else:
        status, data = promise_settle(action["data"], now, locked=promises)
    return fenced(req, status, data, preload(task.promise, now))


def task_fence_read(req, now):
    """T-04 answered by one read, when it writes nothing: a refused fence, or a promise.create that finds its
    promise made before (a replaying workflow re-fences every child it has made; each is most of a chain's
    requests). None when the fence may write: task_fence runs it in a transaction.

    A single statement reads the task, the promise and the preload in one snapshot; the answer is the one
    task_fence would give at that moment.
    """
    action = req["action"]
    if action["kind"] != "promise.create":
        return None
    task, found, branch = read_for_fence(req["id"], action["data"]["id"])
    if task is None:
        return TASK_NOT_FOUND
    refused = held(task, req, now)
    if refused:
        return refused
    if found is None:
        return None
    status, data = promise_create(action["data"], now, found=found)
    return fenced(req, status, data, records(branch, now))


def fenced(req, status, data, preload):
    """task.fence's reply: the fenced action's own reply envelope, and the task's preload."""
    head = {"corrId": req["corr_id"], "status": status, "version": PROTOCOL_VERSION}
    return ok(action={"kind": req["action"]["kind"], "head": head, "data": data}, preload=preload)


def task_heartbeat(req, now):
    """T-05: renew the leases the caller holds; extension E1: an empty list renews every lease of the pid."""
    Task.objects.renew_leases(req["pid"], sorted({(ref["id"], ref["version"]) for ref in req["tasks"]}), now)
    return ok()


def task_suspend(req, now):
    """T-06: the task waits for the awaited promises (200), or keeps running if one has settled (300)."""
    awaited_ids = [action["data"]["awaited"] for action in req["actions"]]
    promises, tasks = Task.objects.locked_all([*awaited_ids, req["id"]])
    task = tasks.get(req["id"])
    if task is None:
        return TASK_NOT_FOUND
    refused = held(task, req, now)
    if refused:
        return refused
    if any(awaited_id not in promises for awaited_id in awaited_ids):
        return Reply(422, "Awaited promise not found")
    task.resumes = []
    if any(not promises[awaited_id].is_live(now) for awaited_id in awaited_ids):
        task.write("resumes")
        return Reply(300, {"preload": preload(task.promise, now)})
    suspend(task, awaited_ids)
    return ok()


def task_fulfill(req, now):
    """T-07: the holder settles the task's own promise; the task is fulfilled with it."""
    task = Task.objects.locked_to_settle(req["id"])
    if task is None:
        return TASK_NOT_FOUND
    refused = held(task, req, now)
    FULFILLS.went(at_once=not refused and task.promise.unregistered)
    if refused:
        return refused
    action = req["action"]["data"]
    settle(task.promise, action["state"], action["value"], now, now)
    return ok(promise=task.promise.to_record())


class Hunch:
    """Whether the next request of a kind is likely to be answered by its first step, judged by how the last ones
    of its kind in this process went (or would have gone). A first step that writes nothing costs a round trip and a
    commit (its lock) before the transaction that answers: workloads where it mostly would (the SDKs' fulfils, whose
    promises have a listener or an awaiter) skip it, the others take it. Only a guess: either way the answer is the
    same. Threads update it without a lock; a lost update only moves the guess by one."""

    def __init__(self, memory=8):
        self.memory, self.score = memory, memory

    @property
    def likely(self):
        return self.score > self.memory // 2

    def went(self, at_once):
        self.score = min(self.memory, self.score + 1) if at_once else max(0, self.score - 1)


FULFILLS = Hunch()  # task.fulfill's: held, and nothing registered on the task's promise


def task_fulfill_at_once(req, now):
    """T-07 in one round trip without a transaction (PostgreSQL), when the caller holds the task and nothing is
    registered on its promise: the settlement's writes are made only then, asked once the promise's lock is held
    (held_and_unregistered). Otherwise None (and off PostgreSQL, or when the last fulfils in this process were
    mostly not so: FULFILLS), and task_fulfill runs, in a transaction: it answers the refusals, and takes the
    listeners and resumes the awaiters."""
    if not FULFILLS.likely:
        return None
    action = req["action"]["data"]
    settled = settle_if(
        req["id"], action["state"], action["value"], now, held_and_unregistered(req["id"], req["version"], now)
    )
    if settled is None:
        return None
    found, written = settled
    if not found:
        return TASK_NOT_FOUND  # no promise, so no task: as it was when the string began
    if not written:
        return None  # task_fulfill runs, and tells FULFILLS
    FULFILLS.went(at_once=True)
    return ok(promise=found[0].to_record())


def task_release(req, now):
    """T-08: the holder gives the task back; it is pending again at the same version."""
    task = Task.objects.locked(req["id"])
    if task is None:
        return TASK_NOT_FOUND
    refused = held(task, req, now)
    if refused:
        return refused
    return_to_pending(task, now)
    return ok()


def task_halt(req, now):
    """T-09: stop dispatching the task until task.continue."""
    task = Task.objects.locked(req["id"])
    if task is None:
        return TASK_NOT_FOUND
    if task.state == TaskState.FULFILLED:
        return Reply(409, "Task is fulfilled")
    if task.state != TaskState.HALTED:
        task.to_halted()
        task.write()
    return ok()


def task_continue(req, now):
    """T-10: a halted task is pending again and re-offered to its target."""
    task = Task.objects.locked(req["id"])
    if task is None:
        return TASK_NOT_FOUND
    if task.state != TaskState.HALTED:
        return Reply(409, "Task is not halted")
    return_to_pending(task, now)
    return ok()


def task_search(req, now):
    """T-11 is a stub in the spec; tasks are filtered and returned as they read now (as task.get shows them)."""
    tasks = Task.objects.select_related("promise")
    if "state" in req:
        tasks = tasks.with_projected_state(TaskState(req["state"]), now)
    rows, cursor = page(tasks, req.get("cursor"), req["limit"])
    return searched("tasks", [t.projected(t.promise, now).to_record() for t in rows], cursor)
