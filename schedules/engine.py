"""Schedule machinery: the schedule timeout (02-timeouts.lean) with its catch-up."""

from floor.counters import schedule_promises_fired
from floor.protocol import later
from promises.engine import create
from schedules.cron import NEVER, expand, next_cron
from schedules.models import Schedule


def catch_up(schedule, now):
    """Create the promise of every occurrence up to `now`, each as if created at its own cron time."""
    fired = 0
    while schedule.next_run_at <= now and schedule.next_run_at != NEVER:
        cron_time = schedule.next_run_at
        create(  # as promise.create would at the cron time
            expand(schedule.promise_id, schedule.id, cron_time),
            schedule.promise_param,
            schedule.promise_tags,
            later(cron_time, schedule.promise_timeout),
            cron_time,
        )
        schedule.last_run_at = cron_time
        schedule.next_run_at = next_cron(schedule.cron, cron_time)
        fired += 1
    schedule_promises_fired(fired)


def on_schedule_timeout(schedule_id, now):
    """A schedule's next run came due (02-timeouts.lean): catch up, and wait for the next run."""
    schedule = Schedule.objects.locked(schedule_id)
    if schedule is None:
        return
    catch_up(schedule, now)
    schedule.save(update_fields=["last_run_at", "next_run_at"])
