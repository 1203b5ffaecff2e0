"""debug.* operations (PROTOCOL.md §7), for test harnesses; enabled only by RESONATE DEBUG."""

from floor.protocol import Reply, ok
from outbox.models import Message, MessageKind, Pause
from promises.models import Callback, Listener, Promise
from schedules.models import Schedule
from tasks.models import Task
from timeouts.sweep import sweep


def debug_start(req, now):
    """Pause the background sweep and delivery."""
    Pause.set(True)
    return ok()


def debug_stop(req, now):
    Pause.set(False)
    return ok()


def debug_reset(req, now):
    """Empty every table of protocol state."""
    for model in (Message, Callback, Listener, Task, Schedule, Promise):
        model.objects.all().delete()
    return ok()


def debug_tick(req, now):
    """Run every timeout transition due at `time` (the same sweep the background runs). Delivers nothing."""
    sweep(req["time"])
    return Reply(200, [])


def debug_snap(req, now):
    """The stored state, as stored (not projected), each list in a fixed order."""
    messages = sorted(
        Message.objects.undelivered(), key=lambda m: (m.kind != MessageKind.EXECUTE, m.subject, m.address)
    )
    return ok(
        promises=[p.to_record() for p in Promise.objects.order_by("id")],
        promiseTimeouts=[
            {"id": p.id, "timeout": p.timeout_at} for p in Promise.objects.filter(timeout_armed=True).order_by("id")
        ],
        callbacks=sorted(
            ({"awaiter": c.awaiter_id, "awaited": c.awaited_id} for c in Callback.objects.all()),
            key=lambda c: (c["awaiter"], c["awaited"]),
        ),
        listeners=sorted(
            ({"id": listener.promise_id, "address": listener.address} for listener in Listener.objects.all()),
            key=lambda listener: (listener["id"], listener["address"]),
        ),
        tasks=[t.to_record() for t in Task.objects.order_by("promise_id")],
        taskTimeouts=[
            {"id": t.id, "type": t.timeout_kind, "timeout": t.timeout_at}
            for t in Task.objects.filter(timeout_kind__isnull=False).order_by("promise_id")
        ],
        messages=[{"address": m.address, "message": m.body()} for m in messages],
    )
