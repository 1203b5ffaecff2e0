"""The schedule timeout with its catch-up, and sweep(now): every due timeout transition, in order."""

from promises.engine import on_promise_timeout
from promises.handlers import promise_create
from promises.models import Promise
from promises.protocol import later
from schedules.cron import NEVER, expand, next_cron
from schedules.models import Schedule
from tasks.engine import on_task_lease_timeout, on_task_retry_timeout
from tasks.models import Task, TimeoutKind


def catch_up(schedule, now):
    """Create the promise of every occurrence up to `now`, each as if created at its own cron time."""
    while schedule.next_run_at <= now and schedule.next_run_at != NEVER:
        cron_time = schedule.next_run_at
        promise_create(
            {
                "id": expand(schedule.promise_id, schedule.id, cron_time),
                "timeout_at": later(cron_time, schedule.promise_timeout),
                "param": schedule.promise_param,
                "tags": schedule.promise_tags,
            },
            cron_time,
        )
        schedule.last_run_at = cron_time
        schedule.next_run_at = next_cron(schedule.cron, cron_time)


def on_schedule_timeout(schedule_id, now):
    """A schedule's next run came due (02-timeouts.lean): catch up, and wait for the next run."""
    schedule = Schedule.objects.locked(schedule_id)
    if schedule is None:
        return
    catch_up(schedule, now)
    schedule.save(update_fields=["last_run_at", "next_run_at"])


# Firing order (decision D15): promise timeouts, task retries, task leases, schedules; each by deadline, id.
TRANSITIONS = (
    ("promise", lambda now: Promise.objects.due(now).values_list("id", flat=True), on_promise_timeout),
    ("retry", lambda now: Task.objects.due(TimeoutKind.RETRY, now).values_list("pk", flat=True),
     on_task_retry_timeout),
    ("lease", lambda now: Task.objects.due(TimeoutKind.LEASE, now).values_list("pk", flat=True),
     on_task_lease_timeout),
    ("schedule", lambda now: Schedule.objects.due(now).values_list("id", flat=True), on_schedule_timeout),
)


def sweep(now):
    """Fire every timeout due at `now`, each at most once, until nothing due is left (decision D15).

    A promise timeout cannot make another timeout due, nor can a retry or a lease (the retry timeout is
    at least 1 ms); only a schedule's catch-up can (its promises may be born with due timeouts). So one
    pass over the categories in order, repeated while schedules create work, fires entries in the order
    D15 gives. Returns how many transitions ran.
    """
    fired = set()
    while True:
        before = len(fired)
        for category, due, transition in TRANSITIONS:
            for entry_id in list(due(now)):
                if (category, entry_id) not in fired:
                    fired.add((category, entry_id))
                    transition(entry_id, now)
        if len(fired) == before:
            return len(fired)
