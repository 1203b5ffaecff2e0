"""Every protocol operation: its envelope kind, the shape of its data, and its handler."""

from typing import NamedTuple

from floor.transactions import Mode, run_atomically
from promises import handlers as promises
from resonate_site.protocol import debug
from resonate_site.protocol import serializers as s
from schedules import handlers as schedules
from tasks import handlers as tasks


class Operation(NamedTuple):
    request: type  # the serializer that decodes `data`
    handler: object  # handler(req, now) -> Reply
    # How it meets PostgreSQL (floor/transactions.py). AUTOCOMMIT: it only reads (reads project: only the
    # timeout transitions write), or writes with one statement.
    mode: Mode = Mode.TRANSACTION
    # first(req, now) -> Reply, or None: answers without a transaction (in autocommit) whatever it can with one
    # statement, a read or a write atomic by itself; when it returns None the handler runs.
    first: object = None
    # Whether `first` writes (its statement is its commit): see run_atomically's ambiguous_none.
    first_writes: bool = False
    # One read by id, as quick as the request's own CPU: answered on the event loop's thread even under load
    # (resonate_site/serving.py, ProtocolThreads).
    quick: bool = False


AUTOCOMMIT = Mode.AUTOCOMMIT

OPERATIONS = {
    "promise.get": Operation(s.ById, promises.promise_get, AUTOCOMMIT, quick=True),
    "promise.create": Operation(s.PromiseCreate, promises.promise_create, AUTOCOMMIT),
    "promise.settle": Operation(s.PromiseSettle, promises.promise_settle, first=promises.promise_settle_at_once),
    "promise.register_callback": Operation(s.PromiseRegisterCallback, promises.promise_register_callback),
    "promise.register_listener": Operation(s.PromiseRegisterListener, promises.promise_register_listener),
    "promise.search": Operation(s.PromiseSearch, promises.promise_search, AUTOCOMMIT),
    "task.get": Operation(s.ById, tasks.task_get, AUTOCOMMIT, quick=True),
    "task.create": Operation(s.TaskCreate, tasks.task_create, first=tasks.task_create_new, first_writes=True),
    "task.acquire": Operation(s.TaskAcquire, tasks.task_acquire, first=tasks.task_acquire_at_once, first_writes=True),
    "task.fence": Operation(s.TaskFence, tasks.task_fence, first=tasks.task_fence_read),
    "task.heartbeat": Operation(s.TaskHeartbeat, tasks.task_heartbeat, AUTOCOMMIT),
    "task.suspend": Operation(s.TaskSuspend, tasks.task_suspend),
    "task.fulfill": Operation(s.TaskFulfill, tasks.task_fulfill, first=tasks.task_fulfill_at_once, first_writes=True),
    "task.release": Operation(s.TaskRelease, tasks.task_release),
    "task.halt": Operation(s.ById, tasks.task_halt),
    "task.continue": Operation(s.ById, tasks.task_continue),
    "task.search": Operation(s.TaskSearch, tasks.task_search, AUTOCOMMIT),
    "schedule.get": Operation(s.ById, schedules.schedule_get, AUTOCOMMIT, quick=True),
    "schedule.create": Operation(s.ScheduleCreate, schedules.schedule_create),
    "schedule.delete": Operation(s.ById, schedules.schedule_delete),
    "schedule.search": Operation(s.ScheduleSearch, schedules.schedule_search, AUTOCOMMIT),
    "debug.start": Operation(s.Empty, debug.debug_start),
    "debug.stop": Operation(s.Empty, debug.debug_stop),
    "debug.reset": Operation(s.Empty, debug.debug_reset),
    "debug.snap": Operation(s.Empty, debug.debug_snap),
    "debug.tick": Operation(s.DebugTick, debug.debug_tick),
}


def quick(envelope):
    """Whether a decoded request envelope asks for a quick operation (Operation.quick)."""
    kind = envelope.get("kind") if type(envelope) is dict else None
    return type(kind) is str and kind in OPERATIONS and OPERATIONS[kind].quick


def run(operation, req, now):
    """Run one operation: its first step, if it has one, then (unless that answered) its handler, each in the
    mode it needs (floor/transactions.py); retried on lost races. Returns the handler's Reply."""
    if operation.first is not None:
        answer = run_atomically(operation.first, req, now, mode=Mode.AUTOCOMMIT, ambiguous_none=operation.first_writes)
        if answer is not None:
            return answer
    return run_atomically(operation.handler, req, now, mode=operation.mode)
