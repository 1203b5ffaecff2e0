"""Every protocol operation: its envelope kind, the shape of its data, and its handler."""

from typing import NamedTuple

from promises import handlers as promises
from promises.transactions import Mode
from resonate_site.protocol import debug
from resonate_site.protocol import serializers as s
from schedules import handlers as schedules
from tasks import handlers as tasks


class Operation(NamedTuple):
    request: type  # the serializer that decodes `data`
    handler: object  # handler(req, now) -> Reply
    # How it meets PostgreSQL (promises/transactions.py). AUTOCOMMIT: it only reads (reads project: only the
    # timeout transitions write), or writes with one statement. PIPELINED: it writes with rows.* only.
    mode: Mode = Mode.TRANSACTION


AUTOCOMMIT, PIPELINED = Mode.AUTOCOMMIT, Mode.PIPELINED

OPERATIONS = {
    "promise.get": Operation(s.ById, promises.promise_get, AUTOCOMMIT),
    "promise.create": Operation(s.PromiseCreate, promises.promise_create, AUTOCOMMIT),
    "promise.settle": Operation(s.PromiseSettle, promises.promise_settle, PIPELINED),
    "promise.register_callback": Operation(s.PromiseRegisterCallback, promises.promise_register_callback, PIPELINED),
    "promise.register_listener": Operation(s.PromiseRegisterListener, promises.promise_register_listener, PIPELINED),
    "promise.search": Operation(s.PromiseSearch, promises.promise_search, AUTOCOMMIT),
    "task.get": Operation(s.ById, tasks.task_get, AUTOCOMMIT),
    "task.create": Operation(s.TaskCreate, tasks.task_create, PIPELINED),
    "task.acquire": Operation(s.TaskAcquire, tasks.task_acquire, PIPELINED),
    "task.fence": Operation(s.TaskFence, tasks.task_fence, PIPELINED),
    "task.heartbeat": Operation(s.TaskHeartbeat, tasks.task_heartbeat, PIPELINED),
    "task.suspend": Operation(s.TaskSuspend, tasks.task_suspend, PIPELINED),
    "task.fulfill": Operation(s.TaskFulfill, tasks.task_fulfill, PIPELINED),
    "task.release": Operation(s.TaskRelease, tasks.task_release, PIPELINED),
    "task.halt": Operation(s.ById, tasks.task_halt, PIPELINED),
    "task.continue": Operation(s.ById, tasks.task_continue, PIPELINED),
    "task.search": Operation(s.TaskSearch, tasks.task_search, AUTOCOMMIT),
    "schedule.get": Operation(s.ById, schedules.schedule_get, AUTOCOMMIT),
    "schedule.create": Operation(s.ScheduleCreate, schedules.schedule_create),
    "schedule.delete": Operation(s.ById, schedules.schedule_delete),
    "schedule.search": Operation(s.ScheduleSearch, schedules.schedule_search, AUTOCOMMIT),
    "debug.start": Operation(s.Empty, debug.debug_start),
    "debug.stop": Operation(s.Empty, debug.debug_stop),
    "debug.reset": Operation(s.Empty, debug.debug_reset),
    "debug.snap": Operation(s.Empty, debug.debug_snap),
    "debug.tick": Operation(s.DebugTick, debug.debug_tick),
}
